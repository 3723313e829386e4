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

    /// The attribute `key`, as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
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
        let spans: Vec<LoggedSpan> = batch.iter().map(LoggedSpan::of).collect();
        self.append_logged(&spans)
    }

    /// Appends spans already in the file's form (local mode's OTLP collector writes the
    /// spans other programs export this way). One write per call, to a file opened for
    /// appending, so lines of concurrent writers do not interleave.
    ///
    /// # Errors
    /// The folder or the file cannot be made or written.
    pub fn append_logged(&self, batch: &[LoggedSpan]) -> std::io::Result<()> {
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
            serde_json::to_writer(&mut out, span)?;
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

/// One span's row of a waterfall: where it sits on the trace's time axis, how deep under
/// its parent, and what it did. The terminal ([`waterfall`]) and the console's trace page
/// draw the same rows.
#[derive(Debug, Clone, PartialEq)]
pub struct WaterfallRow<'a> {
    /// The span.
    pub span: &'a LoggedSpan,
    /// Parents above it within the trace (0 for a root, or a span whose parent is not in
    /// the file); at most 32.
    pub depth: usize,
    /// Start, milliseconds from the trace's first span.
    pub start_ms: f64,
    /// Duration, milliseconds.
    pub took_ms: f64,
    /// Start as a fraction of the time axis, 0 to 1.
    pub from: f64,
    /// End as a fraction of the time axis, 0 to 1.
    pub to: f64,
    /// What it did, as `label value` words: endpoint, attempt, status, error type, outcome,
    /// fan-out size, wait, dead-letter reason, service (for other programs' spans).
    pub what: Vec<String>,
}

/// A waterfall's rows ([`waterfall_rows`]) and its time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Waterfall<'a> {
    /// The trace id of the first span, 32 hex characters.
    pub trace_id: &'a str,
    /// Length of the time axis, milliseconds: the first start to the last end.
    pub total_ms: f64,
    /// One row per span, in the order of `spans`.
    pub rows: Vec<WaterfallRow<'a>>,
}

/// Attributes a row shows, in order, with the word put before the value.
const SHOWN: [(&str, &str); 9] = [
    (keys::ENDPOINT_ID, ""),
    (keys::ATTEMPT, "attempt "),
    ("http.response.status_code", ""),
    ("error.type", "error "),
    (keys::OUTCOME, ""),
    (keys::FANOUT_ENDPOINTS, "endpoints "),
    (keys::WAIT_SECONDS, "wait s "),
    (keys::DEAD_LETTER_REASON, "reason "),
    // Spans other programs exported to local mode's collector name their service.
    ("service.name", "service "),
];

/// Lays `spans` (one trace, [`trace_of`]) on one time axis; `None` when there are none.
pub fn waterfall_rows(spans: &[LoggedSpan]) -> Option<Waterfall<'_>> {
    let first = spans.iter().map(|s| s.start_unix_nano).min()?;
    let last = spans.iter().map(|s| s.end_unix_nano).max().unwrap_or(first);
    let total = (last.saturating_sub(first)).max(1);
    let by_id: HashMap<&str, &LoggedSpan> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let depth = |span: &LoggedSpan| {
        let mut d = 0;
        let mut at = span;
        while let Some(parent) = by_id.get(at.parent_span_id.as_str()) {
            d += 1;
            at = parent;
            if d >= 32 {
                break;
            }
        }
        d
    };
    let rows = spans
        .iter()
        .map(|span| {
            let start = span.start_unix_nano.saturating_sub(first);
            let took = span.end_unix_nano.saturating_sub(span.start_unix_nano);
            let what = SHOWN
                .iter()
                .filter_map(|(key, label)| span.attr(key).map(|v| format!("{label}{v}")))
                .collect();
            WaterfallRow {
                span,
                depth: depth(span),
                start_ms: start as f64 / 1e6,
                took_ms: took as f64 / 1e6,
                from: (start as f64 / total as f64).min(1.0),
                to: ((start + took) as f64 / total as f64).min(1.0),
                what,
            }
        })
        .collect();
    Some(Waterfall {
        trace_id: &spans[0].trace_id,
        total_ms: total as f64 / 1e6,
        rows,
    })
}

/// The waterfall of `spans` (one trace, [`trace_of`]) as text: a line per span, indented
/// under its parent, its start and duration in milliseconds from the first span's start, a
/// bar on one time axis, and what it did (endpoint, attempt, status, outcome).
pub fn waterfall(spans: &[LoggedSpan]) -> String {
    let Some(chart) = waterfall_rows(spans) else {
        return "no spans of this event: is tracing on (tern local collects them in .tern/spans.jsonl)?\n".to_owned();
    };
    let mut out = format!(
        "trace {}\n{:>9} {:>9}  {:<width$}  span\n",
        chart.trace_id,
        "start ms",
        "took ms",
        "",
        width = BAR_WIDTH
    );
    for row in &chart.rows {
        // The last span starts at the axis' end: its mark is the last column.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let from = ((row.from * BAR_WIDTH as f64) as usize).min(BAR_WIDTH - 1);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let to = (row.to * BAR_WIDTH as f64) as usize;
        let bar: String = (0..BAR_WIDTH)
            .map(|i| {
                if i >= from && (i < to.max(from + 1)) {
                    if row.span.error { '!' } else { '#' }
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!(
            "{:>9.1} {:>9.1}  {bar}  {}{} {}\n",
            row.start_ms,
            row.took_ms,
            "  ".repeat(row.depth),
            row.span.name,
            row.what.join(" ")
        ));
    }
    out
}
