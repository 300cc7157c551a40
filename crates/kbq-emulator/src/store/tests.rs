//! Unit tests of the store's names, chunking and visible-log paging.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::stream::chunks_between;
use super::*;
use crate::rows::RowCodec;
use kbq_core::table_schema::TableSchema;

#[test]
fn stream_names_accept_both_default_spellings_and_reject_garbage() {
    let t = "projects/p/datasets/d/tables/t";
    assert_eq!(
        StreamName::parse(&format!("{t}/_default")).unwrap().id,
        StreamId::Default
    );
    assert_eq!(
        StreamName::parse(&format!("{t}/streams/_default"))
            .unwrap()
            .id,
        StreamId::Default
    );
    assert_eq!(
        StreamName::parse(&format!("{t}/streams/abc-_1"))
            .unwrap()
            .id,
        StreamId::Explicit("abc-_1".into())
    );
    for bad in [
        "",
        "projects/p",
        "projects/p/datasets/d/tables/t",
        "projects/p/datasets/d/tables/t/streams/",
        "projects/p/datasets/d/tables/t/streams/a b",
        "projects/p/datasets/d/tables/t/streams/a/b",
        "projects//datasets/d/tables/t/_default",
    ] {
        assert!(StreamName::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn chunks_between_cuts_batches_at_offsets() {
    let codec = Arc::new(
        RowCodec::compile(
            &prost_types::DescriptorProto {
                name: Some("Row".into()),
                ..Default::default()
            },
            &TableSchema::default(),
        )
        .unwrap(),
    );
    let batch = |n: usize| {
        Arc::new(RowBatch {
            rows: (0..n).map(|i| Bytes::from(vec![i as u8])).collect(),
            codec: codec.clone(),
        })
    };
    let batches = vec![(0, batch(2)), (2, batch(3)), (5, batch(1))];
    let got: Vec<(i64, Range<usize>)> = chunks_between(&batches, 1, 4)
        .into_iter()
        .map(|(b, r)| (b.rows.len() as i64, r))
        .collect();
    assert_eq!(got, vec![(2, 1..2), (3, 0..2)]);
    assert!(chunks_between(&batches, 6, 6).is_empty());
}

#[test]
fn visible_log_pages_across_chunks() {
    let codec = Arc::new(
        RowCodec::compile(
            &prost_types::DescriptorProto {
                name: Some("Row".into()),
                ..Default::default()
            },
            &TableSchema::default(),
        )
        .unwrap(),
    );
    let mut log = VisibleLog::default();
    let batch = Arc::new(RowBatch {
        rows: (0..5u8).map(|i| Bytes::from(vec![i])).collect(),
        codec,
    });
    log.push(batch.clone(), 0..2);
    log.push(batch.clone(), 3..5);
    let page: Vec<u8> = log.page(1, 10).iter().map(|r| r.data[0]).collect();
    assert_eq!(page, vec![1, 3, 4]);
    assert_eq!(log.page(3, 10).len(), 1);
    assert!(log.page(4, 10).is_empty());
    assert_eq!(log.page(0, 2).len(), 2);
}

#[test]
fn write_streams_lists_a_tables_explicit_streams_with_their_flush_cursors() {
    let store = Store::new(StoreConfig::default());
    store.insert_dataset(Dataset::new("p", "d")).unwrap();
    let table = |id: &str| {
        let r = TableRef::parse(&format!("projects/p/datasets/d/tables/{id}")).unwrap();
        store
            .insert_table(Table::new(r.clone(), TableSchema::default()))
            .unwrap();
        r
    };
    let (t, other) = (table("t"), table("other"));
    let codec = Arc::new(
        RowCodec::compile(
            &prost_types::DescriptorProto {
                name: Some("Row".into()),
                ..Default::default()
            },
            &TableSchema::default(),
        )
        .unwrap(),
    );
    let rows = |n: u8| RowBatch {
        rows: (0..n).map(|i| Bytes::from(vec![i])).collect(),
        codec: codec.clone(),
    };
    let buffered = store
        .create_write_stream(&t.path(), StreamKind::Buffered)
        .unwrap();
    let stream = store.open_stream(&buffered.name).unwrap();
    store
        .append(&stream, Some(0), rows(5), &buffered.name)
        .unwrap();
    store.flush_rows(&buffered.name, Some(1)).unwrap();
    store
        .create_write_stream(&other.path(), StreamKind::Pending)
        .unwrap();

    let listed = store.write_streams(&t);
    assert_eq!(listed.len(), 1, "only t's explicit stream: {listed:?}");
    let s = &listed[0];
    assert_eq!(s.name, buffered.name);
    assert_eq!(
        (s.kind, s.row_count, s.flushed_offset),
        (StreamKind::Buffered, 5, Some(1))
    );
    assert_eq!(store.write_streams(&other)[0].kind, StreamKind::Pending);
}
