//! Simulated BigQuery REST API behind the `RestTransport` seam of the real `RestClient`: the
//! calls the shells make while running, the group's marker on the table (a label patch, kept in
//! the emulator's store) and the `resolve` query (the highest offset of a partition visible in
//! the table), with seeded faults (refused, applied with the answer lost, delayed).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::TABLE;
use super::bigquery::before;
use super::world::{Gate, SharedDebug, World, lock};
use kafka_bigquery_sink::bigquery::rest_client::{RestFuture, RestTransport};
use kbq_emulator::store::TableRef;

#[derive(Debug)]
pub(super) struct SimRest {
    pub(super) world: SharedDebug,
    pub(super) gate: Arc<Gate>,
    pub(super) process: usize,
}

impl RestTransport for SimRest {
    fn call(
        &self,
        method: &'static str,
        path: String,
        body: Option<serde_json::Value>,
    ) -> RestFuture<'_> {
        Box::pin(async move {
            let world = &self.world.0;
            let unavailable = || {
                let error = serde_json::json!({"error": {"errors": [{"reason": "backendError"}],
                    "message": "simulated: unavailable"}});
                (503, error)
            };
            if before(world, &self.gate, method).await.is_err() {
                return unavailable();
            }
            let answer = {
                let mut w = lock(world);
                let labels = body.as_ref().and_then(|b| b["labels"].as_object().cloned());
                let query = body
                    .as_ref()
                    .and_then(|b| b["query"].as_str().map(String::from));
                match labels {
                    Some(labels) if method == "PATCH" && path == TABLE => {
                        let table = TableRef::parse(TABLE).expect("table");
                        let r = w.store.update_table(&table, |t| {
                            for (k, v) in &labels {
                                t.labels
                                    .insert(k.clone(), v.as_str().unwrap_or_default().into());
                            }
                            Ok::<(), ()>(())
                        });
                        assert!(matches!(r, Ok(Ok(_))), "the table exists");
                        w.trace(format!("bq label {labels:?} by r{}", self.process));
                        (200, serde_json::json!({}))
                    }
                    None if method == "POST" && path == "projects/p/queries" && query.is_some() => {
                        let query = query.expect("checked");
                        let highest = highest_visible(&w, &query);
                        w.count("resolve_queries");
                        w.trace(format!(
                            "bq query {query} by r{}: {highest:?}",
                            self.process
                        ));
                        let v = highest.map(|h| h.to_string());
                        let rows = serde_json::json!([{ "f": [{ "v": v }] }]);
                        (
                            200,
                            serde_json::json!({ "jobComplete": true, "rows": rows }),
                        )
                    }
                    _ => (
                        501,
                        serde_json::json!({"error": {"errors": [{"reason": "notImplemented"}],
                        "message": format!("{method} {path} is not simulated")}}),
                    ),
                }
            };
            let lose = lock(world).chance(0.03);
            self.gate.pass().await;
            if lose {
                return unavailable();
            }
            answer
        })
    }
}

/// The answer to the `resolve` query (`SELECT MAX(`id`) FROM … WHERE `part` = N`, the
/// simulation's offset and partition columns): the highest offset of partition N visible in the
/// table.
fn highest_visible(w: &World, query: &str) -> Option<i64> {
    let partition: i64 = query
        .split("`part` = ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the resolve query filters by the partition column");
    assert!(
        query.starts_with("SELECT MAX(`id`)"),
        "the resolve query asks for the offset column: {query}"
    );
    visible_rows(w)
        .into_iter()
        .filter(|&(p, _)| p as i64 == partition)
        .map(|(_, offset)| offset)
        .max()
}

/// Every visible row of the table as (partition, offset).
pub(super) fn visible_rows(w: &World) -> Vec<(usize, i64)> {
    table_rows(w)
        .into_iter()
        .map(|row| {
            let int = |c: &str| row[c].parse::<i64>().unwrap_or(-1);
            (int("part") as usize, int("id"))
        })
        .collect()
}

/// Every visible row of the table (the applied state of a CDC table), its columns by name.
pub(super) fn table_rows(w: &World) -> Vec<BTreeMap<String, String>> {
    let table_ref = TableRef::parse(TABLE).expect("table");
    let table = w.store.get_table(&table_ref).expect("table");
    let page = w
        .store
        .read_visible_rows(&table_ref, 0, 10_000_000)
        .expect("rows");
    page.rows
        .iter()
        .map(|row| {
            let v = row.codec.render(&row.data, &table.schema);
            (table.schema.fields.iter().enumerate())
                .map(|(i, column)| {
                    let value = v["f"][i]["v"].as_str().unwrap_or_default();
                    (column.name.clone(), value.to_string())
                })
                .collect()
        })
        .collect()
}
