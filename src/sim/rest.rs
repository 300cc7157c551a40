//! Simulated BigQuery REST API behind the `RestTransport` seam of the real `RestClient`: the
//! one call the shells make while running, the group's marker on the table (a label patch),
//! kept in the emulator's store, with seeded faults (refused, applied with the answer lost).

use std::sync::Arc;

use super::TABLE;
use super::bigquery::before;
use super::world::{Gate, SharedDebug, lock};
use crate::bigquery::rest_client::{RestFuture, RestTransport};
use crate::emulator::store::TableRef;

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
            if before(world, &self.gate, "tables.patch").await.is_err() {
                return unavailable();
            }
            let answer = {
                let mut w = lock(world);
                let labels = body.as_ref().and_then(|b| b["labels"].as_object().cloned());
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
