//! Bad records: `errors.tolerance` and the connector's dead-letter queue become
//! `on_bad_record` and `dead_letter.topic`.

use super::Source;
use crate::migrate::report::Outcome;

/// `on_bad_record` and the dead-letter topic, if any.
pub(super) fn bad_records(s: &mut Source) -> (&'static str, Option<String>) {
    let tolerance_all = s
        .get("errors.tolerance")
        .is_some_and(|t| t.eq_ignore_ascii_case("all"));
    let dlq = s
        .get("errors.deadletterqueue.topic.name")
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let on_bad_record = match (tolerance_all, &dlq) {
        (true, Some(_)) => "dead_letter",
        (true, None) => "skip",
        (false, _) => "fail",
    };
    let tolerance_text = match on_bad_record {
        "dead_letter" => {
            "on_bad_record: dead_letter: every bad record goes to the dead-letter topic with its reason, including rows BigQuery refuses (the connector's queue took only conversion and transform failures)"
        }
        "skip" => {
            "on_bad_record: skip: a bad record is dropped, logged and counted (kbq_bad_records… metrics), as errors.tolerance=all without a queue"
        }
        _ => {
            "on_bad_record: fail: the partition with the bad record stops (readiness turns false) while the others go on; the connector failed the whole task"
        }
    };
    let tolerance_outcome = if on_bad_record == "skip" {
        Outcome::Mapped(tolerance_text.into())
    } else {
        Outcome::Changed(tolerance_text.into())
    };
    if s.props.contains_key("errors.tolerance") {
        s.note("errors.tolerance", tolerance_outcome);
    } else {
        s.remark("errors.tolerance (unset: none)", tolerance_outcome);
    }
    if let Some(topic) = &dlq {
        s.note(
            "errors.deadletterqueue.topic.name",
            Outcome::Mapped(format!(
                "dead_letter.topic \"{topic}\"{}",
                if tolerance_all {
                    ""
                } else {
                    " (unused while on_bad_record is fail, as in the connector)"
                }
            )),
        );
    }
    s.note(
        "errors.deadletterqueue.context.headers.enable",
        Outcome::Dropped("dead letters always carry headers with the reason and the source topic, partition and offset".into()),
    );
    s.note(
        "errors.deadletterqueue.topic.replication.factor",
        Outcome::Dropped("the sink does not create the dead-letter topic: create it with this replication factor".into()),
    );
    for key in ["errors.retry.timeout", "errors.retry.delay.max.ms"] {
        s.note(
            key,
            Outcome::Dropped("Kafka and BigQuery errors are retried with backoff (src/backoff.rs) until they pass; a bad record is not retried but handled by on_bad_record".into()),
        );
    }
    for key in ["errors.log.enable", "errors.log.include.messages"] {
        s.note(
            key,
            Outcome::Dropped("bad records are logged (without their contents) and counted by reason in kbq_dead_letter_records_total".into()),
        );
    }
    (on_bad_record, dlq)
}
