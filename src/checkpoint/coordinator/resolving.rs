//! Assigned partitions waiting for their topic's route to resolve (a topic seen for the first
//! time).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;

use crate::tables::{Route, Router};
use kbq_core::protocol::{Assignment, MarkerRequests, TopicPartition};

/// Assigned partitions whose topic's route (and table) is being resolved: the protocol hears of
/// them only once it is, so their recovery reads the right table.
pub(crate) struct Resolving {
    tasks: JoinSet<(TopicPartition, u64, Result<Arc<Route>, String>)>,
    /// The assignment waiting per partition, with the machine's marker requests when it was
    /// received, under a generation: a resolution that finishes after the partition was
    /// revoked (or assigned again) is dropped.
    waiting: HashMap<TopicPartition, (u64, Assignment, MarkerRequests)>,
    next: u64,
}

impl Resolving {
    pub(crate) fn new() -> Self {
        Resolving {
            tasks: JoinSet::new(),
            waiting: HashMap::new(),
            next: 0,
        }
    }

    /// Resolves `tp`'s route in the background.
    pub(crate) fn start(
        &mut self,
        router: &Arc<Router>,
        tp: TopicPartition,
        a: Assignment,
        read_at: MarkerRequests,
    ) {
        self.next += 1;
        let generation = self.next;
        self.waiting.insert(tp.clone(), (generation, a, read_at));
        let router = router.clone();
        self.tasks.spawn(async move {
            let route = router
                .resolve(&tp.topic)
                .await
                .map_err(|e| format!("{e:#}"));
            (tp, generation, route)
        });
    }

    /// The partition is no longer ours: its resolution is dropped when it ends.
    pub(crate) fn forget(&mut self, tp: &TopicPartition) {
        self.waiting.remove(tp);
    }

    /// The next finished resolution of a partition still waiting for it.
    pub(crate) async fn next(
        &mut self,
    ) -> Option<(
        TopicPartition,
        Assignment,
        MarkerRequests,
        Result<Arc<Route>, String>,
    )> {
        loop {
            let Ok((tp, generation, route)) = self.tasks.join_next().await? else {
                continue;
            };
            if self
                .waiting
                .get(&tp)
                .is_some_and(|(g, ..)| *g == generation)
            {
                let (_, a, read_at) = self.waiting.remove(&tp).expect("checked");
                return Some((tp, a, read_at, route));
            }
        }
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.tasks.is_empty()
    }
}
