//! Local mode's own span store (issue 30): when no OTLP endpoint is set, `tern local`
//! appends every span Tern makes to a JSON-lines file (`.tern/spans.jsonl`), and
//! `tern trace <event id>` reads it back and prints the event's trace as a waterfall, with
//! every attempt, wait, dead letter and replay on one time axis.
//!
//! One line per span, written by the SDK's batch thread: the ids in hex, the name, the
//! start and end in Unix nanoseconds, the attributes as text and the linked span ids. The
//! same attribute rules as [`crate::telemetry`] hold: nothing secret is ever in a span.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::Value;
use opentelemetry::trace::Status;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde::{Deserialize, Serialize};

use crate::telemetry::keys;

/// Where `tern local` keeps its spans and `tern trace` reads them by default: relative to
/// the working directory, beside `.tern/local.env`.
pub const DEFAULT_PATH: &str = ".tern/spans.jsonl";

/// Width of the waterfall's bar column, in characters.
pub const BAR_WIDTH: usize = 40;

/// One span as the file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedSpan {
    /// Trace id, 32 hex characters.
    pub trace_id: String,
    /// Span id, 16 hex characters.
    pub span_id: String,
    /// Parent span id, 16 hex characters; all zeros for a root.
    pub parent_span_id: String,
    /// Span name (`fan-out`, `POST`, `retry wait`, `dead-letter`, `replay`, `resend`).
    pub name: String,
    /// Start, Unix nanoseconds.
    pub start_unix_nano: u128,
    /// End, Unix nanoseconds.
    pub end_unix_nano: u128,
    /// Attributes, as text.
    pub attributes: BTreeMap<String, String>,
    /// Linked span ids.
    pub links: Vec<String>,
    /// True when the span's status is an error.
    pub error: bool,
}

impl LoggedSpan {
    fn of(span: &SpanData) -> Self {
        let nanos = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Self {
            trace_id: span.span_context.trace_id().to_string(),
            span_id: span.span_context.span_id().to_string(),
            parent_span_id: span.parent_span_id.to_string(),
            name: span.name.to_string(),
            start_unix_nano: nanos(span.start_time),
            end_unix_nano: nanos(span.end_time),
            attributes: span
                .attributes
                .iter()
                .map(|kv| (kv.key.to_string(), text(&kv.value)))
                .collect(),
            links: span
                .links
                .iter()
                .map(|l| l.span_context.span_id().to_string())
                .collect(),
            error: matches!(span.status, Status::Error { .. }),
        }
    }

    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string(),
        other => other.to_string(),
    }
}

/// A span exporter that appends each span to a JSON-lines file.
#[derive(Debug)]
pub struct SpanLog {
    path: PathBuf,
    lock: Mutex<()>,
}

impl SpanLog {
    /// A log appending to `path` (its folder is made when missing).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    fn append(&self, batch: &[SpanData]) -> std::io::Result<()> {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let mut out = Vec::new();
        for span in batch {
            serde_json::to_writer(&mut out, &LoggedSpan::of(span))?;
            out.push(b'\n');
        }
        file.write_all(&out)
    }
}

impl SpanExporter for SpanLog {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let done = self
            .append(&batch)
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()));
        std::future::ready(done)
    }
}

/// The spans of a log file; lines that do not parse are skipped (a line cut by a crash).
///
/// # Errors
/// The file cannot be read.
pub fn read(path: &Path) -> std::io::Result<Vec<LoggedSpan>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Every span of the traces `event_id`'s spans belong to, oldest first.
pub fn trace_of(spans: &[LoggedSpan], event_id: &str) -> Vec<LoggedSpan> {
    let traces: HashSet<&str> = spans
        .iter()
        .filter(|s| s.attr(keys::EVENT_ID) == Some(event_id))
        .map(|s| s.trace_id.as_str())
        .collect();
    let mut found: Vec<LoggedSpan> = spans
        .iter()
        .filter(|s| traces.contains(s.trace_id.as_str()))
        .cloned()
        .collect();
    found.sort_by_key(|s| (s.start_unix_nano, s.end_unix_nano));
    found
}

/// The waterfall of `spans` (one trace, [`trace_of`]): a line per span, indented under its
/// parent, its start and duration in milliseconds from the first span's start, a bar on
/// one time axis, and what it did (endpoint, attempt, status, outcome).
pub fn waterfall(spans: &[LoggedSpan]) -> String {
    let Some(first) = spans.iter().map(|s| s.start_unix_nano).min() else {
        return "no spans of this event: is tracing on (tern local collects them in .tern/spans.jsonl)?\n".to_owned();
    };
    let last = spans.iter().map(|s| s.end_unix_nano).max().unwrap_or(first);
    let total = (last - first).max(1);
    let by_id: HashMap<&str, &LoggedSpan> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let depth = |span: &LoggedSpan| {
        let mut d = 0;
        let mut at = span;
        while let Some(parent) = by_id.get(at.parent_span_id.as_str()) {
            d += 1;
            at = parent;
            if d > 32 {
                break;
            }
        }
        d
    };
    let mut out = format!(
        "trace {}\n{:>9} {:>9}  {:<width$}  span\n",
        spans[0].trace_id,
        "start ms",
        "took ms",
        "",
        width = BAR_WIDTH
    );
    for span in spans {
        let start = span.start_unix_nano - first;
        let took = span.end_unix_nano.saturating_sub(span.start_unix_nano);
        // The last span starts at the axis' end: its mark is the last column.
        let from = usize::try_from(start * BAR_WIDTH as u128 / total)
            .unwrap_or(BAR_WIDTH)
            .min(BAR_WIDTH - 1);
        let to = usize::try_from((start + took) * BAR_WIDTH as u128 / total).unwrap_or(BAR_WIDTH);
        let bar: String = (0..BAR_WIDTH)
            .map(|i| {
                if i >= from && (i < to.max(from + 1)) {
                    if span.error { '!' } else { '#' }
                } else {
                    '.'
                }
            })
            .collect();
        let mut what = Vec::new();
        for (key, label) in [
            (keys::ENDPOINT_ID, ""),
            (keys::ATTEMPT, "attempt "),
            ("http.response.status_code", ""),
            ("error.type", "error "),
            (keys::OUTCOME, ""),
            (keys::FANOUT_ENDPOINTS, "endpoints "),
            (keys::WAIT_SECONDS, "wait s "),
            (keys::DEAD_LETTER_REASON, "reason "),
        ] {
            if let Some(v) = span.attr(key) {
                what.push(format!("{label}{v}"));
            }
        }
        out.push_str(&format!(
            "{:>9.1} {:>9.1}  {bar}  {}{} {}\n",
            start as f64 / 1e6,
            took as f64 / 1e6,
            "  ".repeat(depth(span)),
            span.name,
            what.join(" ")
        ));
    }
    out
}
