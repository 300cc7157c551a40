//! The connector itself, what it subscribes to and where it writes: the consumer group taken
//! over, `topics`/`topics.regex`, `project` and the dataset.

use std::collections::BTreeSet;

use super::{MigrateError, Source, list, refuse, scalar};
use crate::migrate::draft::Scalar;
use crate::migrate::report::Outcome;

/// The connector's class checked and its consumer group, which the sink takes over.
pub(super) fn group(s: &mut Source) -> Result<String, MigrateError> {
    let class = s.get("connector.class").unwrap_or_default().to_string();
    if !class.ends_with("BigQuerySinkConnector") {
        return Err(refuse(
            "connector.class",
            format!(
                "`{class}` is not the BigQuery sink connector (com.wepay.kafka.connect.bigquery.BigQuerySinkConnector, also Confluent's and Aiven's class)"
            ),
        ));
    }
    s.note(
        "connector.class",
        Outcome::Mapped("the whole file is this sink's config".into()),
    );
    let name = s.get("name").map(str::to_string);
    let group_id = match (s.get("consumer.override.group.id"), &name) {
        (Some(g), _) => g.to_string(),
        (None, Some(n)) => format!("connect-{n}"),
        (None, None) => {
            return Err(MigrateError::Missing(
                "name: the connector has no name, so its consumer group (connect-NAME) is unknown"
                    .into(),
            ));
        }
    };
    let takeover = format!(
        "kafka.group_id \"{group_id}\": the connector's own consumer group, so the sink starts at the offsets the connector committed (an offset without checkpoint metadata is taken as an operator reset: the sink starts there and logs it). Stop the connector first: two consumers in one group would split the partitions. Records the connector wrote after its last offset commit are written once more at the switch; from then on exactly once"
    );
    if s.props.contains_key("consumer.override.group.id") {
        s.note("consumer.override.group.id", Outcome::Changed(takeover));
        s.note(
            "name",
            Outcome::Dropped("the group comes from consumer.override.group.id".into()),
        );
    } else {
        s.note("name", Outcome::Changed(takeover));
    }
    s.note(
        "tasks.max",
        Outcome::Dropped(
            "parallelism is the number of replicas in one consumer group; every partition has its own writer and stream".into(),
        ),
    );
    Ok(group_id)
}

/// The topics listed, or the `kafka.topic_pattern` a `topics.regex` becomes.
pub(super) fn subscription(s: &mut Source) -> Result<(Vec<String>, Option<String>), MigrateError> {
    let topics = s.get("topics").map(list).unwrap_or_default();
    let regex = s
        .get("topics.regex")
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let topic_pattern = match (&regex, topics.is_empty()) {
        (Some(_), false) => {
            return Err(refuse(
                "topics.regex",
                "both topics and topics.regex are set; Kafka Connect refuses that too",
            ));
        }
        (None, true) => {
            return Err(MigrateError::Missing(
                "topics or topics.regex: the connector subscribes to nothing".into(),
            ));
        }
        (Some(r), true) => {
            // Java's Pattern.matches() takes the whole name; librdkafka anchors only the start.
            let posix = r.replace("\\d", "[0-9]");
            s.note(
                "topics.regex",
                Outcome::Changed(format!(
                    "kafka.topic_pattern \"^({posix})$\": librdkafka reads a POSIX extended regular expression, not java.util.regex; anchored at both ends as Java's matches() is{}; Java-only syntax (\\w, (?i), lookarounds) fails validate",
                    if posix != *r { ", \\d written as [0-9]" } else { "" }
                )),
            );
            Some(format!("^({posix})$"))
        }
        (None, false) => {
            s.note("topics", Outcome::Mapped("kafka.topics".into()));
            None
        }
    };
    Ok((topics, topic_pattern))
}

/// The project and the one dataset every table is in.
pub(super) fn destination(s: &mut Source) -> Result<(Scalar, Scalar), MigrateError> {
    let project = match s.get("project") {
        Some(p) if !p.is_empty() => scalar("project", p)?,
        _ => return Err(MigrateError::Missing("project: no BigQuery project".into())),
    };
    s.note("project", Outcome::Mapped("bigquery.project".into()));
    let dataset = if let Some(d) = s.get("defaultDataset").filter(|d| !d.is_empty()) {
        let d = scalar("defaultDataset", d)?;
        s.note("defaultDataset", Outcome::Mapped("bigquery.dataset".into()));
        d
    } else if let Some(datasets) = s.get("datasets").map(list) {
        // The old form: `<topic regex>=<dataset>` pairs.
        let names: BTreeSet<String> = datasets
            .iter()
            .filter_map(|pair| pair.split_once('=').map(|(_, d)| d.trim().to_string()))
            .collect();
        match names.len() {
            1 => {
                let d = names.into_iter().next().expect("one dataset");
                s.note(
                    "datasets",
                    Outcome::Changed(format!(
                        "bigquery.dataset \"{d}\": every topic goes to this one dataset (the regexes of the old form are not needed with one dataset)"
                    )),
                );
                Scalar::Text(d)
            }
            _ => {
                return Err(refuse(
                    "datasets",
                    "several datasets by topic regex: this sink writes one dataset per process (run one per dataset)",
                ));
            }
        }
    } else {
        return Err(MigrateError::Missing(
            "defaultDataset: no BigQuery dataset".into(),
        ));
    };

    Ok((project, dataset))
}
