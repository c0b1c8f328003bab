//! litelet's own log lines (upstream `--logging-format` / `logging.format`): `text`,
//! env_logger's lines as before (the default), or `json`, one object per line as
//! upstream's JSON logger (component-base `logs/json`) writes them:
//! `{"ts":<milliseconds since the epoch, fractional>,"caller":"<dir>/<file>:<line>",
//! "msg":"…","v":<verbosity>}`, errors without `v`, to stderr. log shippers that parse
//! the kubelet's JSON parse litelet's the same way.
//!
//! `v` is the `-v` level at which a line shows: info and warnings 0, debug 2, trace 5
//! (litelet's mapping of `-v`, see `config::log_filter`).
//!
//! [`init`] runs once on the main thread before any other thread exists; the line
//! itself is the pure [`json_line`].

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Number, Value};

/// How litelet writes its log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// env_logger's text lines.
    #[default]
    Text,
    /// Upstream's JSON lines.
    Json,
}

/// A `logging.format` upstream does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("logging.format: Unsupported value: {0:?}: supported values: \"json\", \"text\"")]
pub struct UnsupportedLogFormat(pub String);

impl std::str::FromStr for LogFormat {
    type Err = UnsupportedLogFormat;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        LogFormat::parse(text)
    }
}

impl LogFormat {
    /// Parses `--logging-format` / `logging.format`.
    pub fn parse(text: &str) -> Result<LogFormat, UnsupportedLogFormat> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(UnsupportedLogFormat(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The `v` of a line at `level`; none for errors (upstream's error lines have none).
pub fn verbosity(level: log::Level) -> Option<u8> {
    match level {
        log::Level::Error => None,
        log::Level::Warn | log::Level::Info => Some(0),
        log::Level::Debug => Some(2),
        log::Level::Trace => Some(5),
    }
}

/// `node/lease.rs:42` from `src/node/lease.rs` and 42: the file and its folder, as
/// upstream's short caller.
pub fn short_caller(file: &str, line: u32) -> String {
    let mut parts = file.rsplit('/');
    let name = parts.next().unwrap_or(file);
    match parts.next() {
        Some(dir) => format!("{dir}/{name}:{line}"),
        None => format!("{name}:{line}"),
    }
}

/// One JSON log line (without the newline).
pub fn json_line(
    at: SystemTime,
    caller: Option<(&str, u32)>,
    level: log::Level,
    message: &str,
) -> String {
    let millis = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0);
    let ts = Number::from_f64(millis).map_or_else(|| "0".to_owned(), |n| n.to_string());
    // Written by hand, not through a map: the keys keep upstream's order.
    let mut line = format!("{{\"ts\":{ts}");
    if let Some((file, number)) = caller {
        let caller = Value::String(short_caller(file, number));
        line.push_str(&format!(",\"caller\":{caller}"));
    }
    line.push_str(&format!(",\"msg\":{}", Value::String(message.to_owned())));
    if let Some(v) = verbosity(level) {
        line.push_str(&format!(",\"v\":{v}"));
    }
    line.push('}');
    line
}

/// Installs the process's logger: `format`, lines up to `filter` (`-v`), `RUST_LOG`
/// winning where set.
pub fn init(format: LogFormat, filter: log::LevelFilter) {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(filter);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    match format {
        LogFormat::Text => {
            builder.format_timestamp_millis();
        }
        LogFormat::Json => {
            builder.format(|out, record| {
                let caller = record.file().zip(record.line());
                let message = record.args().to_string();
                writeln!(
                    out,
                    "{}",
                    json_line(SystemTime::now(), caller, record.level(), &message)
                )
            });
        }
    }
    builder.init();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn formats_as_upstream_names_them() {
        assert_eq!(LogFormat::parse("text"), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse("json"), Ok(LogFormat::Json));
        assert_eq!(LogFormat::default(), LogFormat::Text);
        for bad in ["JSON", "xml", ""] {
            let err = LogFormat::parse(bad).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "logging.format: Unsupported value: {bad:?}: supported values: \"json\", \"text\""
                )
            );
        }
    }

    #[test]
    fn json_lines_carry_upstreams_keys_in_upstreams_order() {
        let at = UNIX_EPOCH + Duration::from_micros(1_624_215_312_270_835);
        let cases = [
            (
                log::Level::Info,
                Some(("src/node/lease.rs", 42)),
                "lease: created kube-node-lease/edge-1",
                r#"{"ts":1624215312270.835,"caller":"node/lease.rs:42","msg":"lease: created kube-node-lease/edge-1","v":0}"#,
            ),
            (
                log::Level::Warn,
                Some(("main.rs", 7)),
                "say \"hi\"\nagain",
                r#"{"ts":1624215312270.835,"caller":"main.rs:7","msg":"say \"hi\"\nagain","v":0}"#,
            ),
            (
                log::Level::Debug,
                None,
                "d",
                r#"{"ts":1624215312270.835,"msg":"d","v":2}"#,
            ),
            (
                log::Level::Trace,
                None,
                "t",
                r#"{"ts":1624215312270.835,"msg":"t","v":5}"#,
            ),
            (
                log::Level::Error,
                Some(("/home/u/.cargo/registry/src/x/ureq-3/src/run.rs", 9)),
                "failed",
                r#"{"ts":1624215312270.835,"caller":"src/run.rs:9","msg":"failed"}"#,
            ),
        ];
        for (level, caller, message, want) in cases {
            let line = json_line(at, caller, level, message);
            assert_eq!(line, want);
            let parsed: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(parsed["msg"], message);
        }
    }
}
