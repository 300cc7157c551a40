//! Logs through `tracing`: human text, or JSON with the field names Cloud Logging reads
//! (`severity`, `message`, `timestamp`, structured fields beside them).

use std::fmt;
use std::io::IsTerminal;

use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogConfig, LogFormat, defaults};

/// Where the log filter came from.
#[derive(Debug, PartialEq, Eq)]
enum FilterSource {
    /// `log.level`: set in the config, so it wins over `RUST_LOG` (a manifest's or a base
    /// image's `RUST_LOG` must not silently undo what the config says).
    Config,
    /// `RUST_LOG`: the operator's choice where the config leaves `log.level` unset.
    Environment,
    /// Neither: the default level.
    Default,
}

/// The filter and its source: `log.level` when the config sets it, else `RUST_LOG` when set,
/// else the default (docs/operations.md, Logs).
fn filter_directives<'a>(
    level: Option<&'a str>,
    rust_log: Option<&'a str>,
) -> (&'a str, FilterSource) {
    match (level, rust_log) {
        (Some(level), _) => (level, FilterSource::Config),
        (None, Some(env)) if !env.trim().is_empty() => (env, FilterSource::Environment),
        _ => (defaults::LOG_LEVEL, FilterSource::Default),
    }
}

/// Installs the global subscriber once (later calls are ignored, e.g. in tests).
pub fn init(config: &LogConfig) {
    let rust_log = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    let (directives, source) = filter_directives(config.level.as_deref(), rust_log.as_deref());
    // validate has checked log.level; a malformed RUST_LOG falls back to the default level.
    let filter =
        EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new(defaults::LOG_LEVEL));
    // Colours only on a terminal: a log redirected to a file or collected from a container keeps
    // plain text (the JSON format never colours).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match config.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(CloudLoggingJson).try_init(),
    };
    if source == FilterSource::Config
        && let Some(ignored) = rust_log.as_deref()
    {
        tracing::info!(
            rust_log = %ignored,
            log_level = directives,
            "RUST_LOG is ignored: the config sets log.level (unset it to filter with RUST_LOG)"
        );
    }
}

/// One JSON object per line: `{"timestamp", "severity", "message", "target", <fields>}`.
pub struct CloudLoggingJson;

impl<S, N> FormatEvent<S, N> for CloudLoggingJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let severity = match *meta.level() {
            tracing::Level::ERROR => "ERROR",
            tracing::Level::WARN => "WARNING",
            tracing::Level::INFO => "INFO",
            tracing::Level::DEBUG | tracing::Level::TRACE => "DEBUG",
        };
        let mut fields = JsonFields::default();
        event.record(&mut fields);
        let mut object = serde_json::Map::new();
        object.insert("timestamp".into(), now_rfc3339().into());
        object.insert("severity".into(), severity.into());
        object.insert(
            "message".into(),
            fields.message.take().unwrap_or_default().into(),
        );
        object.insert("target".into(), meta.target().into());
        for (k, v) in fields.fields {
            object.insert(k, v);
        }
        writeln!(writer, "{}", serde_json::Value::Object(object))
    }
}

#[derive(Default)]
struct JsonFields {
    message: Option<String>,
    fields: Vec<(String, serde_json::Value)>,
}

impl tracing::field::Visit for JsonFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
        } else {
            self.fields.push((field.name().to_string(), value.into()));
        }
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.fields.push((field.name().to_string(), value.into()));
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.fields.push((field.name().to_string(), value.into()));
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.fields.push((field.name().to_string(), value.into()));
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.fields.push((field.name().to_string(), text.into()));
        }
    }
}

/// UTC time as RFC 3339 with microseconds, without a date-time crate.
fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_level_wins_over_rust_log_which_applies_only_where_the_config_is_silent() {
        assert_eq!(
            filter_directives(Some("warn"), Some("debug")),
            ("warn", FilterSource::Config)
        );
        assert_eq!(
            filter_directives(None, Some("debug,rdkafka=warn")),
            ("debug,rdkafka=warn", FilterSource::Environment)
        );
        assert_eq!(
            filter_directives(None, Some(" ")),
            ("info", FilterSource::Default)
        );
        assert_eq!(
            filter_directives(None, None),
            ("info", FilterSource::Default)
        );
    }

    #[test]
    fn rfc3339_timestamps_have_the_expected_shape() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 27, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }
}
