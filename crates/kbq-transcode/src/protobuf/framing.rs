//! The message-index array between the Confluent header and a Protobuf message: which message
//! of the registered `.proto` file the record is (`docs/mapping.md`, "Protobuf framing").
//!
//! Confluent's serializers write a count and then one index per nesting level, every number a
//! zig-zag varint; the common path `[0]` (the file's first message) is the single byte `0x00`.
//! Older non-Java clients wrote plain unsigned varints instead, and some JavaScript clients wrote
//! no array at all; both are configurable per route because the bytes alone cannot tell them
//! apart from the standard encoding.

use serde::Deserialize;

use crate::RecordError;

/// How the message-index array is encoded on a topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageIndexEncoding {
    /// Count and indexes as zig-zag varints (every current Confluent serializer).
    #[default]
    Zigzag,
    /// Count and indexes as unsigned varints (older Python, Go and .NET clients; their
    /// `use.deprecated.format`).
    Unsigned,
    /// No array: the message follows the schema id and is the file's first message.
    None,
}

/// Message paths nest at most this deep (a message nested in 15 others).
pub const MAX_DEPTH: usize = 16;

/// The path of a message in its file: the first index among the top-level messages, each next
/// among the nested messages of the previous one. Small and `Copy`: it is a cache key per record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessagePath {
    len: u8,
    indexes: [u32; MAX_DEPTH],
}

impl MessagePath {
    /// `[0]`, the file's first message.
    pub const FIRST: MessagePath = MessagePath {
        len: 1,
        indexes: [0; MAX_DEPTH],
    };

    pub fn new(indexes: &[u32]) -> Option<MessagePath> {
        if indexes.is_empty() {
            return Some(MessagePath::FIRST);
        }
        if indexes.len() > MAX_DEPTH {
            return None;
        }
        let mut path = MessagePath {
            len: indexes.len() as u8,
            indexes: [0; MAX_DEPTH],
        };
        path.indexes[..indexes.len()].copy_from_slice(indexes);
        Some(path)
    }

    pub fn indexes(&self) -> &[u32] {
        &self.indexes[..self.len as usize]
    }
}

impl std::fmt::Display for MessagePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.indexes())
    }
}

/// Splits the message-index array off the body that follows the 5-byte Confluent header.
pub fn split_message_indexes(
    body: &[u8],
    encoding: MessageIndexEncoding,
) -> Result<(MessagePath, &[u8]), RecordError> {
    // The common case first: `[0]` as one zero byte (the same in both encodings).
    match (encoding, body.first()) {
        (MessageIndexEncoding::None, _) => return Ok((MessagePath::FIRST, body)),
        (_, Some(0)) => return Ok((MessagePath::FIRST, &body[1..])),
        _ => {}
    }
    let mut pos = 0;
    let count = read_number(body, &mut pos, encoding, "the index count")?;
    if count as usize > MAX_DEPTH {
        return Err(bad(format!(
            "{count} indexes, more than the {MAX_DEPTH} levels a message path may have"
        )));
    }
    let mut indexes = [0u32; MAX_DEPTH];
    for slot in indexes.iter_mut().take(count as usize) {
        *slot = read_number(body, &mut pos, encoding, "a message index")?;
    }
    let path = MessagePath::new(&indexes[..count as usize]).expect("bounded above");
    Ok((path, &body[pos..]))
}

fn read_number(
    body: &[u8],
    pos: &mut usize,
    encoding: MessageIndexEncoding,
    what: &str,
) -> Result<u32, RecordError> {
    let start = *pos;
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let Some(&b) = body.get(*pos) else {
            return Err(bad(format!("ends early while reading {what}")));
        };
        *pos += 1;
        // Kafka's varints are 32-bit: at most five bytes.
        if shift > 28 {
            return Err(bad(format!(
                "{what} at byte {start} is longer than 5 bytes"
            )));
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    let v = v as u32;
    let n = match encoding {
        MessageIndexEncoding::Zigzag => ((v >> 1) as i32) ^ -((v & 1) as i32),
        _ => i32::try_from(v).map_err(|_| bad(format!("{what} {v} is out of range")))?,
    };
    u32::try_from(n).map_err(|_| {
        bad(format!(
            "{what} is negative ({n}); the producer may have written unsigned varints (the deprecated format)"
        ))
    })
}

fn bad(reason: String) -> RecordError {
    RecordError::BadMessageIndexes { reason }
}

/// Frames a Protobuf message the way Confluent serializers do (for tests and tools).
pub fn frame_protobuf(schema_id: u32, path: &[u32], message: &[u8]) -> Vec<u8> {
    let mut out = crate::frame_confluent(schema_id, &[]);
    if path.is_empty() || path == [0] {
        out.push(0);
    } else {
        put_zigzag(&mut out, path.len() as i32);
        for &i in path {
            put_zigzag(&mut out, i as i32);
        }
    }
    out.extend_from_slice(message);
    out
}

fn put_zigzag(out: &mut Vec<u8>, n: i32) {
    let mut v = ((n << 1) ^ (n >> 31)) as u32;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(bytes: &[u8], e: MessageIndexEncoding) -> Result<(Vec<u32>, Vec<u8>), RecordError> {
        split_message_indexes(bytes, e).map(|(p, rest)| (p.indexes().to_vec(), rest.to_vec()))
    }

    #[test]
    fn zigzag_paths_decode_as_confluent_writes_them() {
        use MessageIndexEncoding::Zigzag;
        // The table of docs/mapping.md ("Protobuf framing").
        let cases: [(&[u8], &[u32]); 5] = [
            (&[0x00], &[0]),
            (&[0x02, 0x02], &[1]),
            (&[0x02, 0x04], &[2]),
            (&[0x04, 0x00, 0x00], &[0, 0]),
            (&[0x04, 0x00, 0x02], &[0, 1]),
        ];
        for (bytes, path) in cases {
            let mut with_body = bytes.to_vec();
            with_body.extend_from_slice(&[0x08, 0x01]);
            assert_eq!(
                split(&with_body, Zigzag).unwrap(),
                (path.to_vec(), vec![0x08, 0x01]),
                "{bytes:02x?}"
            );
            assert_eq!(frame_protobuf(7, path, &[0x08, 0x01])[5..], with_body[..]);
        }
        // 64 as a two-byte zig-zag varint: 128 = 0x80 0x01.
        assert_eq!(split(&[0x02, 0x80, 0x01], Zigzag).unwrap().0, vec![64]);
    }

    #[test]
    fn older_encodings_are_read_when_configured() {
        // [1] with unsigned varints is 01 01; read as zig-zag its count is -1.
        assert_eq!(
            split(&[0x01, 0x01, 0x08], MessageIndexEncoding::Unsigned).unwrap(),
            (vec![1], vec![0x08])
        );
        let err = split(&[0x01, 0x01], MessageIndexEncoding::Zigzag).unwrap_err();
        assert!(err.to_string().contains("unsigned"), "{err}");
        // No array at all: the whole body is the message.
        assert_eq!(
            split(&[0x08, 0x01], MessageIndexEncoding::None).unwrap(),
            (vec![0], vec![0x08, 0x01])
        );
    }

    #[test]
    fn malformed_arrays_are_record_errors() {
        use MessageIndexEncoding::Zigzag;
        assert!(split(&[], Zigzag).is_err());
        assert!(split(&[0x04, 0x00], Zigzag).is_err());
        assert!(split(&[0x40], Zigzag).is_err()); // 32 indexes
        assert!(split(&[0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], Zigzag).is_err());
        assert!(split(&[0x02, 0x03], Zigzag).is_err()); // index -2
    }
}
