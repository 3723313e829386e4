//! Local mode's OTLP collector (issue 30): an OTLP/HTTP receiver on 127.0.0.1 that appends
//! every span it is sent to local mode's span file (`.tern/spans.jsonl`), beside Tern's own.
//! A program that writes events and a receiver that traces export their spans here, so
//! `tern trace <event id>` and the console's waterfall show the whole trace: the program's
//! span, Tern's fan-out, attempts and waits, and the receiver's own spans.
//!
//! It speaks OTLP/HTTP with protobuf bodies (`POST /v1/traces`,
//! `Content-Type: application/x-protobuf`, no compression), which is what the OpenTelemetry
//! SDKs' OTLP/HTTP exporters send by default; anything else is refused with the status the
//! OTLP specification names (OTLP 1.x, "OTLP/HTTP Response": 415 for an unsupported media
//! type, 400 for a body that does not decode).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, status};
use prost::Message as _;
use tern_handlers::span_log::{LoggedSpan, SpanLog};
use tokio::task::JoinHandle;

/// Port `tern local` asks for first: 4318, OTLP/HTTP's registered port, where the
/// OpenTelemetry SDKs' exporters send by default (OTLP specification, "OTLP/HTTP
/// Default Port"). So a program run beside `tern local` exports here with no setting.
pub const DEFAULT_COLLECTOR_PORT: u16 = 4318;

/// Path of the traces export (OTLP specification, "OTLP/HTTP Request").
pub const TRACES_PATH: &str = "/v1/traces";

/// Largest export body accepted, bytes: 4 MiB (the default `max_recv_msg_size` of the
/// OpenTelemetry Collector's OTLP receiver). Above it the request is refused with 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Resource attribute copied onto each collected span, so the waterfall names who made it.
pub const SERVICE_NAME: &str = "service.name";

/// Errors starting the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The address could not be bound (taken, or not local).
    #[error("OTLP collector cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running collector; stops when dropped.
#[derive(Debug)]
pub struct Collector {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Collector {
    /// Starts a collector on `addr` (port 0: any free port) appending to the span file
    /// `path` (made with its folder when missing).
    ///
    /// # Errors
    /// [`CollectorError::Bind`] when the address cannot be bound.
    pub async fn start(addr: SocketAddr, path: impl Into<PathBuf>) -> Result<Self, CollectorError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| CollectorError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| CollectorError::Bind { addr, source })?;
        let log = Arc::new(SpanLog::new(path));
        let app = Router::new()
            .route(TRACES_PATH, post(export))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(log);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "OTLP collector stopped");
            }
        });
        Ok(Self { addr, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OTLP/HTTP base URL to give an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The full traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub fn traces_url(&self) -> String {
        format!("http://{}{TRACES_PATH}", self.addr)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn export(
    State(log): State<Arc<SpanLog>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !media.starts_with("application/x-protobuf") {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "this collector takes OTLP/HTTP protobuf (Content-Type: application/x-protobuf)",
        )
            .into_response();
    }
    if headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity")
    {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "this collector takes uncompressed bodies (set the exporter's compression to none)",
        )
            .into_response();
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        return (
            StatusCode::BAD_REQUEST,
            "not an OTLP ExportTraceServiceRequest",
        )
            .into_response();
    };
    let spans = logged(&request);
    let appended = tokio::task::spawn_blocking(move || log.append_logged(&spans)).await;
    match appended {
        Ok(Ok(())) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            ExportTraceServiceResponse::default().encode_to_vec(),
        )
            .into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "OTLP collector cannot write the span file");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the span file cannot be written",
            )
                .into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "span writer failed").into_response(),
    }
}

/// The spans of an export, as the span file keeps them; each carries its resource's
/// `service.name`.
pub fn logged(request: &ExportTraceServiceRequest) -> Vec<LoggedSpan> {
    let mut out = Vec::new();
    for resource_spans in &request.resource_spans {
        let service = resource_spans.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == SERVICE_NAME)
                .and_then(|kv| kv.value.as_ref())
                .map(text)
        });
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                out.push(logged_span(span, service.as_deref()));
            }
        }
    }
    out
}

fn logged_span(span: &Span, service: Option<&str>) -> LoggedSpan {
    let mut attributes: std::collections::BTreeMap<String, String> = span
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect();
    if let Some(service) = service {
        attributes
            .entry(SERVICE_NAME.to_owned())
            .or_insert_with(|| service.to_owned());
    }
    LoggedSpan {
        trace_id: hex(&span.trace_id),
        span_id: hex(&span.span_id),
        // A root's parent is empty in OTLP; the file writes all zeros, as the SDK does.
        parent_span_id: if span.parent_span_id.is_empty() {
            "0".repeat(16)
        } else {
            hex(&span.parent_span_id)
        },
        name: span.name.clone(),
        start_unix_nano: u128::from(span.start_time_unix_nano),
        end_unix_nano: u128::from(span.end_time_unix_nano),
        attributes,
        links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
        error: span
            .status
            .as_ref()
            .is_some_and(|s| s.code == status::StatusCode::Error as i32),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        // Arrays, maps and bytes are not shown in the waterfall; their presence is kept.
        Some(_) => "(structured)".to_owned(),
        None => String::new(),
    }
}
