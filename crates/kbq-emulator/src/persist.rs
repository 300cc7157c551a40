//! On-disk state of an emulator started with `--data-dir`, so tables, streams, rows and flush
//! cursors survive a restart of the process.
//!
//! Layout (format version [`FORMAT_VERSION`]):
//! * `meta.log` — JSON lines. Line 1 is the header `{"format":"kbq-emulator","version":N}`; every
//!   other line is one [`MetaRecord`] (dataset, table insert/patch, table delete, stream
//!   creation, flush, finalize, commit, expire), written before the change becomes visible.
//! * `rows/<stream>.rows` — one binary append-only file per stream (`<table uid>._default` for a
//!   table's default stream): an 8-byte magic `KBQROWS\0`, a little-endian `u32` version, then
//!   records `[tag u8][len u32][payload]`. Tag 1 declares a writer descriptor (with the table
//!   schema it was compiled against); tag 2 is one append (visibility sequence number, first
//!   offset, descriptor index, rows). An append costs one buffered write of the rows, no fsync:
//!   the files survive the process being killed, not the machine losing power.
//!
//! A record cut short by a kill is dropped (and the file truncated to its last whole record) at
//! the next start. A file with another version is refused with an error naming the file.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::rows::RowCodec;
use crate::store::{Dataset, RowBatch, Store, StoreConfig, StreamKind, Table, WriteStream};
use kbq_core::table_schema::TableSchema;

/// The version written into every file header; files with another version are refused.
pub const FORMAT_VERSION: u32 = 1;
const META_FORMAT: &str = "kbq-emulator";
const ROWS_MAGIC: &[u8; 8] = b"KBQROWS\0";
const ROWS_HEADER_LEN: u64 = 12;
const TAG_CODEC: u8 = 1;
const TAG_APPEND: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("emulator data file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "emulator data file {path} has format version {found}; this build reads version {supported} only (use another --data-dir or the matching build)"
    )]
    UnknownVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("emulator data file {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One metadata change.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MetaRecord {
    Dataset {
        dataset: Dataset,
    },
    /// A dataset deleted; its tables' deletes are recorded before it.
    DatasetDelete {
        project: String,
        dataset: String,
    },
    /// Table insert or patch: the full resource after the change.
    Table {
        uid: String,
        location: String,
        table: Table,
    },
    TableDelete {
        uid: String,
    },
    Stream {
        id: String,
        table_uid: String,
        kind: StreamKind,
        create_time_us: i64,
    },
    Flush {
        id: String,
        offset: i64,
        seq: u64,
    },
    Finalize {
        id: String,
    },
    Commit {
        ids: Vec<String>,
        time_us: i64,
        seq: u64,
    },
    Expire {
        id: String,
    },
}

#[derive(Serialize, Deserialize)]
struct MetaHeader {
    format: String,
    version: u32,
}

/// The metadata log plus the directory of row logs.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    meta: Mutex<File>,
}

impl Journal {
    pub(crate) fn write(&self, record: &MetaRecord) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.meta.lock().expect("meta log lock").write_all(&line)
    }

    /// Opens (creating if needed) the row log of a stream, for appending.
    pub(crate) fn row_log(&self, name: &str) -> io::Result<RowLog> {
        let path = self.dir.join("rows").join(format!("{name}.rows"));
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let mut codecs = 0;
        if file.metadata()?.len() < ROWS_HEADER_LEN {
            // New, or its header was torn by a kill: nothing was ever appended to it.
            file.set_len(0)?;
            let mut header = ROWS_MAGIC.to_vec();
            header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            file.write_all(&header)?;
        } else {
            // Appending to an existing log (after a restart): continue its descriptor numbering.
            file.seek(SeekFrom::Start(0))?;
            codecs = scan_rows(&path, &mut BufReader::new(&mut file))
                .map_err(io::Error::other)?
                .codec_records;
        }
        Ok(RowLog {
            file,
            last_codec: None,
            next_codec_index: codecs,
        })
    }
}

/// The append-only row file of one stream.
#[derive(Debug)]
pub struct RowLog {
    file: File,
    last_codec: Option<(Arc<RowCodec>, u32)>,
    next_codec_index: u32,
}

impl RowLog {
    /// Writes one append; the caller holds the stream's lock, so records are in offset order.
    pub(crate) fn append(
        &mut self,
        seq: u64,
        first: i64,
        batch: &RowBatch,
        schema: impl FnOnce() -> TableSchema,
    ) -> io::Result<()> {
        let codec_index = match &self.last_codec {
            Some((c, i)) if Arc::ptr_eq(c, &batch.codec) => *i,
            _ => {
                let index = self.next_codec_index;
                let descriptor = batch.codec.descriptor().encode_to_vec();
                let schema = serde_json::to_vec(&schema()).map_err(io::Error::other)?;
                let mut payload = Vec::with_capacity(8 + descriptor.len() + schema.len());
                payload.extend_from_slice(&index.to_le_bytes());
                payload.extend_from_slice(&(descriptor.len() as u32).to_le_bytes());
                payload.extend_from_slice(&descriptor);
                payload.extend_from_slice(&schema);
                let mut record = vec![TAG_CODEC];
                record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                record.extend_from_slice(&payload);
                self.file.write_all(&record)?;
                self.next_codec_index += 1;
                self.last_codec = Some((batch.codec.clone(), index));
                index
            }
        };
        let rows_len: usize = batch.rows.iter().map(|r| 4 + r.len()).sum();
        let payload_len = 8 + 8 + 4 + 4 + rows_len;
        let payload_len = u32::try_from(payload_len)
            .map_err(|_| io::Error::other("append too large for the row log"))?;
        let mut w = BufWriter::with_capacity(64 * 1024, &mut self.file);
        w.write_all(&[TAG_APPEND])?;
        w.write_all(&payload_len.to_le_bytes())?;
        w.write_all(&seq.to_le_bytes())?;
        w.write_all(&first.to_le_bytes())?;
        w.write_all(&codec_index.to_le_bytes())?;
        w.write_all(&(batch.rows.len() as u32).to_le_bytes())?;
        for row in &batch.rows {
            w.write_all(&(row.len() as u32).to_le_bytes())?;
            w.write_all(row)?;
        }
        w.flush()
    }
}

/// A decoded row-log record.
enum RowRecord {
    Codec {
        index: u32,
        descriptor: Box<prost_types::DescriptorProto>,
        schema: TableSchema,
    },
    Append {
        seq: u64,
        first: i64,
        codec: u32,
        rows: Vec<Bytes>,
    },
}

struct RowScan {
    records: Vec<RowRecord>,
    codec_records: u32,
    /// Length of the file up to the last whole record.
    valid_len: u64,
}

fn scan_rows(path: &Path, r: &mut impl Read) -> Result<RowScan, PersistError> {
    read_rows_header(path, r)?;
    let mut out = RowScan {
        records: Vec::new(),
        codec_records: 0,
        valid_len: 12,
    };
    loop {
        let mut head = [0u8; 5];
        match read_full(r, &mut head) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(io_err(path)(e)),
        }
        let len = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
        let mut payload = vec![0u8; len];
        if !read_full(r, &mut payload).map_err(io_err(path))? {
            break;
        }
        let payload = Bytes::from(payload);
        let record = match head[0] {
            TAG_CODEC => codec_record(&payload),
            TAG_APPEND => append_record(&payload),
            other => Err(format!("unknown record tag {other}")),
        }
        .map_err(|detail| PersistError::Corrupt {
            path: path.to_path_buf(),
            detail,
        })?;
        if let RowRecord::Codec { .. } = record {
            out.codec_records += 1;
        }
        out.records.push(record);
        out.valid_len += 5 + len as u64;
    }
    Ok(out)
}

/// The row log's magic and format version.
fn read_rows_header(path: &Path, r: &mut impl Read) -> Result<(), PersistError> {
    let mut header = [0u8; 12];
    r.read_exact(&mut header).map_err(io_err(path))?;
    if &header[..8] != ROWS_MAGIC {
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            detail: "not an emulator row log (bad magic)".into(),
        });
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(PersistError::UnknownVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

/// A codec record: its index, the writer's descriptor, the table schema; or why it is corrupt.
fn codec_record(payload: &Bytes) -> Result<RowRecord, String> {
    if payload.len() < 8 {
        return Err("short descriptor record".into());
    }
    let index = u32::from_le_bytes(payload[0..4].try_into().expect("4 bytes"));
    let dlen = u32::from_le_bytes(payload[4..8].try_into().expect("4 bytes")) as usize;
    let desc = payload
        .get(8..8 + dlen)
        .ok_or_else(|| "short descriptor".to_string())?;
    let descriptor =
        prost_types::DescriptorProto::decode(desc).map_err(|e| format!("descriptor: {e}"))?;
    let schema =
        serde_json::from_slice(&payload[8 + dlen..]).map_err(|e| format!("table schema: {e}"))?;
    Ok(RowRecord::Codec {
        index,
        descriptor: Box::new(descriptor),
        schema,
    })
}

/// An append record: its sequence number, first row offset, codec and rows (each a slice of
/// the record's buffer); or why it is corrupt.
fn append_record(payload: &Bytes) -> Result<RowRecord, String> {
    if payload.len() < 24 {
        return Err("short append record".into());
    }
    let seq = u64::from_le_bytes(payload[0..8].try_into().expect("8 bytes"));
    let first = i64::from_le_bytes(payload[8..16].try_into().expect("8 bytes"));
    let codec = u32::from_le_bytes(payload[16..20].try_into().expect("4 bytes"));
    let n = u32::from_le_bytes(payload[20..24].try_into().expect("4 bytes")) as usize;
    let mut rows = Vec::with_capacity(n.min(payload.len()));
    let mut at = 24;
    for _ in 0..n {
        let len = payload
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or_else(|| "short row length".to_string())?;
        at += 4;
        if at + len > payload.len() {
            return Err("short row".into());
        }
        // Zero copy: every row is a slice of the record's buffer.
        rows.push(payload.slice(at..at + len));
        at += len;
    }
    Ok(RowRecord::Append {
        seq,
        first,
        codec,
        rows,
    })
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean or torn end of file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Opens a persistent store in `dir`: creates the layout on first use, otherwise replays it.
pub fn open_store(config: StoreConfig, dir: &Path) -> Result<Arc<Store>, PersistError> {
    std::fs::create_dir_all(dir.join("rows")).map_err(io_err(dir))?;
    let meta_path = dir.join("meta.log");
    let records = read_meta(&meta_path)?;
    let meta = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&meta_path)
        .map_err(io_err(&meta_path))?;
    let journal = Journal {
        dir: dir.to_path_buf(),
        meta: Mutex::new(meta),
    };
    if records.is_none() {
        let header = serde_json::to_string(&MetaHeader {
            format: META_FORMAT.into(),
            version: FORMAT_VERSION,
        })
        .expect("header serialises");
        journal
            .meta
            .lock()
            .expect("meta log lock")
            .write_all(format!("{header}\n").as_bytes())
            .map_err(io_err(&meta_path))?;
    }
    let store = Arc::new(Store::with_journal(config, Some(journal)));
    replay(&store, dir, records.unwrap_or_default())?;
    Ok(store)
}

/// Reads `meta.log`; `None` when it does not exist yet. Truncates a torn last line.
fn read_meta(path: &Path) -> Result<Option<Vec<MetaRecord>>, PersistError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut valid_len = reader.read_line(&mut line).map_err(io_err(path))? as u64;
    if !line.ends_with('\n') {
        // Empty, or the header itself was torn by a kill before any record: start afresh.
        truncate_to(path, 0)?;
        return Ok(None);
    }
    let header: MetaHeader =
        serde_json::from_str(line.trim_end()).map_err(|e| PersistError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("bad header: {e}"),
        })?;
    if header.format != META_FORMAT {
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("unknown format {:?}", header.format),
        });
    }
    if header.version != FORMAT_VERSION {
        return Err(PersistError::UnknownVersion {
            path: path.to_path_buf(),
            found: header.version,
            supported: FORMAT_VERSION,
        });
    }
    let mut records = Vec::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        if !line.ends_with('\n') {
            // Torn by a kill in the middle of a write: that change never completed.
            break;
        }
        let record = serde_json::from_str(line.trim_end()).map_err(|e| PersistError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("record at byte {valid_len}: {e}"),
        })?;
        records.push(record);
        valid_len += n as u64;
    }
    truncate_to(path, valid_len)?;
    Ok(Some(records))
}

fn truncate_to(path: &Path, len: u64) -> Result<(), PersistError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    if file.metadata().map_err(io_err(path))?.len() > len {
        file.set_len(len).map_err(io_err(path))?;
    }
    Ok(())
}

type Chunk = (u64, Arc<RowBatch>, Range<usize>);

/// What replay collects across its passes: the chunks that became visible, per table uid (with
/// the sequence they became visible at), and the highest visibility sequence seen.
#[derive(Default)]
struct Replayed {
    visible: std::collections::HashMap<String, Vec<Chunk>>,
    max_seq: u64,
}

fn replay(store: &Arc<Store>, dir: &Path, records: Vec<MetaRecord>) -> Result<(), PersistError> {
    let later = restore_objects(store, dir, records)?;
    let mut replayed = Replayed::default();
    for (stream, file) in live_streams(store) {
        let path = dir.join("rows").join(format!("{file}.rows"));
        restore_rows(store, &stream, &path, &mut replayed)?;
    }
    restore_stream_states(store, later, &mut replayed);
    for (uid, mut chunks) in replayed.visible {
        chunks.sort_by_key(|(seq, _, _)| *seq);
        if let Some(default) = store.default_stream_by_table_uid(&uid) {
            store.restore_visible(&default.table, chunks.into_iter().map(|(_, b, r)| (b, r)));
        }
    }
    store
        .visibility_seq
        .store(replayed.max_seq + 1, std::sync::atomic::Ordering::Release);
    Ok(())
}

/// Pass 1: the object graph (datasets, tables, streams). Returns the stream-state changes,
/// which wait until the rows are loaded.
fn restore_objects(
    store: &Arc<Store>,
    dir: &Path,
    records: Vec<MetaRecord>,
) -> Result<Vec<MetaRecord>, PersistError> {
    let meta_path = dir.join("meta.log");
    let persist = |e: crate::store::StoreError| PersistError::Corrupt {
        path: meta_path.clone(),
        detail: e.to_string(),
    };
    let mut later = Vec::new();
    for record in records {
        match record {
            MetaRecord::Dataset { dataset } => store.restore_dataset(dataset),
            MetaRecord::DatasetDelete { project, dataset } => {
                store.restore_dataset_delete(&project, &dataset)
            }
            MetaRecord::Table {
                uid,
                location,
                table,
            } => {
                store.restore_table(uid, location, table).map_err(persist)?;
            }
            MetaRecord::TableDelete { uid } => store.restore_table_delete(&uid),
            MetaRecord::Stream {
                id,
                table_uid,
                kind,
                create_time_us,
            } => {
                store
                    .restore_stream(id, &table_uid, kind, create_time_us)
                    .map_err(persist)?;
            }
            other => later.push(other),
        }
    }
    Ok(later)
}

/// Pass 2, for one live stream (default streams included): its row log read up to its last
/// whole record (a torn tail is cut off), its appends restored.
fn restore_rows(
    store: &Arc<Store>,
    stream: &Arc<WriteStream>,
    path: &Path,
    replayed: &mut Replayed,
) -> Result<(), PersistError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    };
    if f.metadata().map_err(io_err(path))?.len() < ROWS_HEADER_LEN {
        return Ok(());
    }
    let scan = scan_rows(path, &mut BufReader::new(&mut f))?;
    drop(f);
    truncate_to(path, scan.valid_len)?;
    let mut codecs: Vec<Arc<RowCodec>> = Vec::new();
    for record in scan.records {
        match record {
            RowRecord::Codec {
                index,
                descriptor,
                schema,
            } => {
                let codec = RowCodec::compile(&descriptor, &schema)
                    .or_else(|_| RowCodec::compile(&descriptor, &stream.table_schema()))
                    .map_err(|e| PersistError::Corrupt {
                        path: path.to_path_buf(),
                        detail: format!("descriptor {index}: {e}"),
                    })?;
                codecs.push(Arc::new(codec));
            }
            RowRecord::Append {
                seq,
                first,
                codec,
                rows,
            } => {
                let codec =
                    codecs
                        .get(codec as usize)
                        .cloned()
                        .ok_or_else(|| PersistError::Corrupt {
                            path: path.to_path_buf(),
                            detail: format!("append refers to unknown descriptor {codec}"),
                        })?;
                replayed.max_seq = replayed.max_seq.max(seq);
                let batch = Arc::new(RowBatch { rows, codec });
                if let Some((_, batch, range)) = store.restore_append(stream, first, batch) {
                    (replayed.visible)
                        .entry(stream.table.uid.clone())
                        .or_default()
                        .push((seq, batch, range));
                }
            }
        }
    }
    Ok(())
}

/// Pass 3: flush cursors, finalizations, commits and expiries, in log order.
fn restore_stream_states(store: &Arc<Store>, later: Vec<MetaRecord>, replayed: &mut Replayed) {
    for record in later {
        match record {
            MetaRecord::Flush { id, offset, seq } => {
                if let Some(s) = store.stream_by_id(&id) {
                    replayed.max_seq = replayed.max_seq.max(seq);
                    let chunks = store.restore_flush(&s, offset);
                    let entry = replayed.visible.entry(s.table.uid.clone()).or_default();
                    entry.extend(chunks.into_iter().map(|(b, r)| (seq, b, r)));
                }
            }
            MetaRecord::Finalize { id } => {
                if let Some(s) = store.stream_by_id(&id) {
                    store.restore_finalize(&s);
                }
            }
            MetaRecord::Commit { ids, time_us, seq } => {
                replayed.max_seq = replayed.max_seq.max(seq);
                for id in ids {
                    if let Some(s) = store.stream_by_id(&id) {
                        let chunks = store.restore_commit(&s, time_us);
                        let entry = replayed.visible.entry(s.table.uid.clone()).or_default();
                        entry.extend(chunks.into_iter().map(|(b, r)| (seq, b, r)));
                    }
                }
            }
            MetaRecord::Expire { id } => {
                if let Some(s) = store.stream_by_id(&id) {
                    store.restore_expire(&s);
                }
            }
            _ => {}
        }
    }
}

/// Every stream the store knows after pass 1, with its row-log file name.
fn live_streams(store: &Store) -> Vec<(Arc<WriteStream>, String)> {
    let mut out = Vec::new();
    for table in store.all_tables() {
        if let Some(d) = table.default_stream.get() {
            out.push((d.clone(), format!("{}._default", table.uid)));
        }
    }
    for s in store.all_streams() {
        out.push((s.clone(), s.id.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_log_of_another_version_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.rows");
        let mut bytes = ROWS_MAGIC.to_vec();
        bytes.extend_from_slice(&99u32.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = scan_rows(&path, &mut File::open(&path).unwrap())
            .err()
            .unwrap();
        assert!(matches!(
            err,
            PersistError::UnknownVersion { found: 99, .. }
        ));
        assert!(err.to_string().contains("x.rows"));
    }

    #[test]
    fn files_torn_inside_their_header_are_started_afresh() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meta.log"), "{\"format\":\"kbq-em").unwrap();
        let store = open_store(StoreConfig::default(), dir.path()).unwrap();
        store
            .insert_dataset(Dataset::new("p", "d"))
            .expect("a fresh log accepts records");
        drop(store);
        let store = open_store(StoreConfig::default(), dir.path()).unwrap();
        assert!(store.get_dataset("p", "d").is_some());

        let journal = store.journal.as_ref().unwrap();
        let torn = dir.path().join("rows").join("torn.rows");
        std::fs::write(&torn, &ROWS_MAGIC[..5]).unwrap();
        journal.row_log("torn").unwrap();
        let scan = scan_rows(&torn, &mut File::open(&torn).unwrap()).unwrap();
        assert_eq!(scan.valid_len, ROWS_HEADER_LEN);
    }

    #[test]
    fn a_meta_log_of_another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("meta.log"),
            "{\"format\":\"kbq-emulator\",\"version\":7}\n",
        )
        .unwrap();
        let err = open_store(StoreConfig::default(), dir.path())
            .err()
            .unwrap();
        assert!(
            matches!(
                err,
                PersistError::UnknownVersion {
                    found: 7,
                    supported: 1,
                    ..
                }
            ),
            "{err}"
        );
    }
}
