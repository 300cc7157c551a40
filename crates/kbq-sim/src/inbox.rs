//! The coordinator's inbox, checked on its own: a follow-up event that an action produces is
//! handled only after the input that caused it is done (never inside it), and queued events are
//! handled in the order they arrived (docs/architecture.md, "The shape": the
//! shell handles events in the order the model tests queue them, so the models prove the shell). The coordinator is the real
//! one of a simulated process; what it does is read from the commands it sends its consumer
//! thread, in the order it sends them.

use std::sync::mpsc as std_mpsc;

use super::consumer::tp;
use super::driver::Sim;
use super::{Params, TOPIC};
use kafka_bigquery_sink::checkpoint::coordinator::Input;
use kafka_bigquery_sink::kafka::consumer::{ConsumerCommand, ConsumerEvent};
use kbq_core::offsets::NextOffset;
use kbq_core::protocol::{Assignment, PartitionOrigin, TopicPartition};

/// The commands sent so far, as short lines.
fn sent(commands: &std_mpsc::Receiver<ConsumerCommand>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(command) = commands.try_recv() {
        out.push(match command {
            ConsumerCommand::Start { tp, from, .. } => format!("start {tp} from {}", from.0),
            ConsumerCommand::Stop { tp } => format!("stop {tp}"),
            ConsumerCommand::Release { tp } => format!("release {tp}"),
            ConsumerCommand::RevokeSeen => "revoke seen".into(),
            other => format!("{other:?}"),
        });
    }
    out
}

fn first_start() -> Result<Assignment, String> {
    Ok(Assignment {
        committed: None,
        low: NextOffset(0),
        high: NextOffset(0),
        origin: PartitionOrigin::Existing,
    })
}

#[test]
fn follow_up_events_wait_for_the_input_that_caused_them_and_keep_their_order() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut sim = Sim::new(&Params::seed(1));
        let proc = sim.procs[0].as_mut().expect("started");
        let commands = &proc.consumer.commands;
        let coordinator = proc.coordinator.as_mut().expect("running");
        let mut exit = None;
        let (p0, p1, p2): (TopicPartition, TopicPartition, TopicPartition) = (tp(0), tp(1), tp(2));
        assert_eq!(p2.topic, TOPIC);
        sent(commands);

        // Three partitions start for the first time: a writer each.
        let assigned = ConsumerEvent::Assigned(vec![
            (p0.clone(), first_start()),
            (p1.clone(), first_start()),
            (p2.clone(), first_start()),
        ]);
        let _ = coordinator.step(Input::Consumer(assigned), &mut exit);
        assert_eq!(
            sent(commands),
            [
                "start events/0 from 0",
                "start events/1 from 0",
                "start events/2 from 0"
            ]
        );
        // p0's and p2's seeks fail: their writers are gone, the machine still has them running.
        for p in [&p0, &p2] {
            let failed = ConsumerEvent::SeekFailed {
                tp: p.clone(),
                reason: "simulated".into(),
            };
            let _ = coordinator.step(Input::Consumer(failed), &mut exit);
        }
        assert_eq!(sent(commands), ["stop events/0", "stop events/2"]);

        // One input: the revoke of all three. The machine stops each writer; p0 and p2 have
        // none, so their `WriterStopped` is a follow-up event, appended to the inbox (p0's
        // first). Handled after the revoke is done, each then releases its partition (the table
        // is not marked: nothing to commit), in the order the follow-ups were queued. Handled
        // inside the revoke, p0's release would come before p1's stop; out of order, p2's
        // release before p0's.
        let revoke = ConsumerEvent::RevokeBegan {
            partitions: vec![p0.clone(), p1.clone(), p2.clone()],
            lost: false,
        };
        let flow = coordinator.step(Input::Consumer(revoke), &mut exit);
        assert!(flow.is_continue());
        assert_eq!(
            sent(commands),
            [
                "stop events/0",
                "stop events/1",
                "stop events/2",
                "revoke seen",
                "release events/0",
                "release events/2",
            ]
        );
        coordinator.kill();
    });
    runtime.shutdown_background();
}
