//! The run loop played a step at a time by the deterministic simulation (`crates/kbq-sim`,
//! docs/simulation.md), with the `testing` feature only: the simulation takes what each source
//! has ready, decides with its seeded schedule in which order the inputs arrive, and delivers
//! each to the same inbox `run` delivers to.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::{Coordinator, Exit, Input, SAY_AGAIN};

impl Coordinator {
    /// Moves every input that is ready into its source's queue: consumer, writers, finished I/O.
    pub fn take_ready(&mut self, queues: &mut [VecDeque<Input>; 3]) {
        // Routes are resolved up front in the simulation: nothing waits in `resolving`.
        debug_assert!(self.resolving.is_idle());
        while let Ok(e) = self.consumer_events.try_recv() {
            queues[0].push_back(Input::Consumer(e));
        }
        while let Ok(e) = self.writer_rx.try_recv() {
            queues[1].push_back(Input::Writer(e));
        }
        while let Some(done) = self.io.try_join_next() {
            if let Ok(e) = done {
                queues[2].push_back(Input::Machine(e));
            }
        }
    }

    /// Delivers one input as `run` does; `Break` once the consumer thread ended.
    pub fn step(&mut self, input: Input, exit: &mut Option<Exit>) -> std::ops::ControlFlow<()> {
        let flow = self.deliver(input);
        if let Some(e) = self.exit.take() {
            *exit = Some(e);
        }
        flow
    }

    /// The ticker's input.
    pub fn step_tick(&mut self) {
        let _ = self.deliver(Input::Tick);
    }

    /// SIGTERM's input; returns the deadline.
    pub fn step_shutdown(&mut self) -> Instant {
        let _ = self.deliver(Input::Shutdown);
        Instant::now() + self.settings.shutdown_deadline
    }

    /// The shutdown deadline's input; returns when it is said again.
    pub fn step_shutdown_deadline(&mut self) -> Instant {
        let _ = self.deliver(Input::ShutdownDeadline);
        Instant::now() + SAY_AGAIN
    }

    /// A SIGKILL: every writer task stops where it waits, nothing more runs.
    pub fn kill(&mut self) {
        for w in self.writers.values() {
            w.task.abort();
        }
    }
}
