//! `datasets.delete` as BigQuery answers it: an empty dataset goes, one with tables is refused
//! (400 `resourceInUse`) unless `deleteContents=true`, which takes its tables with it; a missing
//! dataset is 404. Also across a restart of an emulator with `--data-dir`.

use crate::rest_support::{Rest, assert_error, start};
use kbq_emulator::server::{Emulator, EmulatorConfig};
use serde_json::json;

#[tokio::test]
async fn an_empty_dataset_is_deleted_and_then_not_found() {
    let emu = start().await;
    emu.dataset("empty").await;
    let (status, body) = emu.delete("/datasets/empty").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(body, serde_json::Value::Null);
    let (status, body) = emu.get("/datasets/empty").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Dataset p:empty");
    let (status, body) = emu.delete("/datasets/empty").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Dataset p:empty");
    // The id is free again.
    emu.dataset("empty").await;
}

#[tokio::test]
async fn a_dataset_with_tables_is_refused_without_delete_contents() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", json!([{"name": "a", "type": "INT64"}]))
        .await;
    for query in ["", "?deleteContents=false"] {
        let (status, body) = emu.delete(&format!("/datasets/d{query}")).await;
        assert_eq!(status, 400, "{body}");
        assert_error(&body, 400, "resourceInUse", "Dataset p:d is still in use");
    }
    assert_eq!(emu.get("/datasets/d/tables/t").await.0, 200);
}

#[tokio::test]
async fn delete_contents_takes_the_tables_and_leaves_other_datasets_alone() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.dataset("other").await;
    for t in ["t1", "t2"] {
        emu.table("d", t, json!([{"name": "a", "type": "INT64"}]))
            .await;
    }
    emu.table("other", "t1", json!([{"name": "a", "type": "INT64"}]))
        .await;
    let (status, body) = emu.delete("/datasets/d?deleteContents=true").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(emu.get("/datasets/d").await.0, 404);
    assert_eq!(emu.get("/datasets/d/tables/t1").await.0, 404);
    assert_eq!(emu.get("/datasets/other/tables/t1").await.0, 200);
    // Recreated, the dataset starts empty: the old tables do not come back.
    emu.dataset("d").await;
    let (status, body) = emu.get("/datasets/d/tables").await;
    assert_eq!(status, 200);
    assert_eq!(body["totalItems"], 0, "{body}");
    emu.table("d", "t1", json!([{"name": "b", "type": "STRING"}]))
        .await;
}

#[tokio::test]
async fn a_deleted_dataset_stays_deleted_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || EmulatorConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..EmulatorConfig::local()
    };
    let rest = |emulator: Emulator| Rest {
        base: format!("http://{}/bigquery/v2/projects/p", emulator.addr),
        emulator,
        http: reqwest::Client::new(),
    };
    let emu = rest(Emulator::start(config()).await.unwrap());
    emu.dataset("gone").await;
    emu.dataset("kept").await;
    emu.table("gone", "t", json!([{"name": "a", "type": "INT64"}]))
        .await;
    emu.table("kept", "t", json!([{"name": "a", "type": "INT64"}]))
        .await;
    assert_eq!(
        emu.delete("/datasets/gone?deleteContents=true").await.0,
        204
    );
    emu.emulator.stop();

    let emu = rest(Emulator::start(config()).await.unwrap());
    assert_eq!(emu.get("/datasets/gone").await.0, 404);
    assert_eq!(emu.get("/datasets/gone/tables/t").await.0, 404);
    assert_eq!(emu.get("/datasets/kept/tables/t").await.0, 200);
}
