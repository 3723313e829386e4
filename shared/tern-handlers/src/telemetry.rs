//! OpenTelemetry traces of Tern's own work (issue 30): the relay's fan-out, each delivery
//! attempt (an HTTP client span), the wait before a retry, dead-lettering, replay and
//! resend, as spans of the trace the application's outbox item names
//! ([`tern_core::TraceContext`]), exported over OTLP/HTTP (protobuf).
//!
//! **Off by default, and then free:** no exporter, no provider and no thread exist unless
//! [`init_from_env`] finds an OTLP endpoint (or a test or local mode calls [`install`]);
//! every span site first asks [`tracer`], one atomic load, and builds nothing when it is
//! `None`.
//!
//! **Configuration** is OpenTelemetry's standard environment: `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns it on; `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` (`parentbased_traceidratio` in the stacks) and
//! `OTEL_TRACES_SAMPLER_ARG` (the ratio) are read by the SDK; `OTEL_SDK_DISABLED=true` turns
//! it off again.
//!
//! **Lambda:** spans are batched on the SDK's own thread and exported with a blocking HTTP
//! client; [`flush`] must run before an invocation returns, since Lambda freezes the
//! process afterwards and a span still in the batch would be lost (or sent minutes late).
//!
//! **What an attribute may hold:** ids (event, endpoint, tenant, delivery), the event type,
//! numbers, outcomes, the receiver's scheme, host and port. Never a secret, a header value,
//! a URL path or query (webhook URLs often carry a token in their path), or a payload byte.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags,
    TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use tern_core::{TraceContext, TraceParent};

/// The instrumentation scope of every span Tern makes.
pub const SCOPE: &str = "tern";

/// How long [`flush`] waits for the exporter, at most: 2 seconds, well within the
/// sender's time reserve at the end of an invocation (`tern_aws::wiring`).
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Attribute keys Tern adds beside OpenTelemetry's semantic conventions.
pub mod keys {
    /// The event id (the `webhook-id`).
    pub const EVENT_ID: &str = "tern.event.id";
    /// The event type.
    pub const EVENT_TYPE: &str = "tern.event.type";
    /// The tenant id.
    pub const TENANT_ID: &str = "tern.tenant.id";
    /// The endpoint id.
    pub const ENDPOINT_ID: &str = "tern.endpoint.id";
    /// The attempt number within the budget, from 1.
    pub const ATTEMPT: &str = "tern.attempt";
    /// The budget's replay count (0 before any replay or resend).
    pub const REPLAY_COUNT: &str = "tern.replay_count";
    /// What the attempt led to: `delivered`, `retry`, `requeued`, `dead_letter:<reason>`.
    pub const OUTCOME: &str = "tern.outcome";
    /// How many endpoints a fan-out sent the event to.
    pub const FANOUT_ENDPOINTS: &str = "tern.fanout.endpoints";
    /// Why a delivery was dead-lettered.
    pub const DEAD_LETTER_REASON: &str = "tern.dead_letter.reason";
    /// The wait before the next attempt, in seconds of the retry schedule.
    pub const WAIT_SECONDS: &str = "tern.retry.wait_seconds";
}

struct Installed {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (a bad endpoint URL, a bad header setting).
    #[error("the OTLP exporter cannot be built: {0}")]
    Exporter(String),
}

/// The tracer, when tracing is on; `None` (one atomic load) when it is off.
pub fn tracer() -> Option<&'static SdkTracer> {
    INSTALLED.get().map(|i| &i.tracer)
}

/// True when tracing is on in this process.
pub fn enabled() -> bool {
    INSTALLED.get().is_some()
}

/// Turns tracing on for this process with `provider` (its exporter, sampler and
/// resource). The first call wins: a second is ignored and returns false. For local
/// mode and the tests; the Lambda binaries use [`init_from_env`].
pub fn install(provider: SdkTracerProvider) -> bool {
    let tracer = provider.tracer(SCOPE);
    INSTALLED.set(Installed { provider, tracer }).is_ok()
}

/// A provider exporting over OTLP/HTTP (protobuf) to `traces_url` (the full URL,
/// `.../v1/traces`), or to the one the standard environment names when `None`; with
/// `also_log`, every span is appended to that span file as well ([`crate::span_log`]).
///
/// # Errors
/// [`TelemetryError::Exporter`].
pub fn otlp_provider(
    service_name: &str,
    traces_url: Option<&str>,
    also_log: Option<&std::path::Path>,
) -> Result<SdkTracerProvider, TelemetryError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig as _};
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(FLUSH_TIMEOUT);
    if let Some(url) = traces_url {
        builder = builder.with_endpoint(url);
    }
    let exporter = builder
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service_name.to_owned());
    let mut builder = SdkTracerProvider::builder().with_batch_exporter(exporter);
    if let Some(path) = also_log {
        builder = builder.with_batch_exporter(crate::span_log::SpanLog::new(path));
    }
    Ok(builder
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build())
}

/// A provider that appends every span to the JSON-lines file `path`
/// ([`crate::span_log`]): local mode's own store, which `tern trace` reads. Every span is
/// recorded (no sampling).
pub fn span_log_provider(service_name: &str, path: &std::path::Path) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_batch_exporter(crate::span_log::SpanLog::new(path))
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build()
}

/// Turns tracing on when the standard environment asks for it: an
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` that is set and
/// not empty, and `OTEL_SDK_DISABLED` not `true`. Returns whether it is on. Without an
/// endpoint nothing is built.
///
/// # Errors
/// [`TelemetryError::Exporter`] for an endpoint or header setting the exporter refuses.
pub fn init_from_env(service_name: &str) -> Result<bool, TelemetryError> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if disabled
        || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    {
        return Ok(false);
    }
    install(otlp_provider(service_name, None, None)?);
    Ok(true)
}

/// Exports every finished span now, waiting at most [`FLUSH_TIMEOUT`]; nothing when
/// tracing is off. An export that fails is logged, never an error of the invocation: a
/// lost span must not cost a delivery.
pub async fn flush() {
    flush_within(FLUSH_TIMEOUT).await;
}

/// [`flush`] before a Lambda invocation's `deadline` (wall-clock): waits at most
/// [`FLUSH_TIMEOUT`] and never past 200 ms before the deadline, so the handler still
/// answers in time (spans left in the batch then go with the next invocation's flush).
pub async fn flush_before(deadline: SystemTime) {
    let left = deadline
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .saturating_sub(Duration::from_millis(200));
    flush_within(left.min(FLUSH_TIMEOUT)).await;
}

async fn flush_within(limit: Duration) {
    let Some(installed) = INSTALLED.get() else {
        return;
    };
    if limit.is_zero() {
        return;
    }
    let provider = installed.provider.clone();
    // The batch thread exports while this waits; the wait is bounded even if the export
    // is not (the exporter's own timeout is FLUSH_TIMEOUT).
    let flushed = tokio::time::timeout(
        limit,
        tokio::task::spawn_blocking(move || provider.force_flush()),
    )
    .await;
    match flushed {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "spans not exported"),
        Ok(Err(e)) => tracing::warn!(error = %e, "span flush did not finish"),
        Err(_) => tracing::warn!("span flush timed out"),
    }
}

/// The OpenTelemetry span context of a W3C trace context (a remote parent).
pub fn span_context(trace: &TraceContext) -> SpanContext {
    let parent = trace.traceparent();
    let state = trace
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        state,
    )
}

/// The context whose span is `trace` (a remote parent), or an empty one (a new trace).
pub fn parent_context(trace: Option<&TraceContext>) -> Context {
    match trace {
        Some(t) => Context::new().with_remote_span_context(span_context(t)),
        None => Context::new(),
    }
}

/// The W3C trace context of a span, to carry in a message or send as `traceparent`;
/// `None` for an invalid one.
pub fn trace_context_of(span: &SpanContext) -> Option<TraceContext> {
    if !span.is_valid() {
        return None;
    }
    let parent = TraceParent {
        trace_id: span.trace_id().to_bytes(),
        parent_id: span.span_id().to_bytes(),
        flags: span.trace_flags().to_u8(),
    };
    let state = span.trace_state().header();
    Some(TraceContext::new(parent).with_tracestate((!state.is_empty()).then_some(state)))
}

/// A link to the span `trace` names (a pair's previous attempt).
pub fn link(trace: &TraceContext) -> Link {
    Link::with_context(span_context(trace))
}

/// Starts a span named `name` of `kind`, child of `parent` (or a new trace), started at
/// `start` (now when `None`), with `attributes` and `links`. `None` when tracing is off.
pub fn start(
    name: &'static str,
    kind: SpanKind,
    parent: Option<&TraceContext>,
    start: Option<SystemTime>,
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
) -> Option<Span> {
    let tracer = tracer()?;
    let mut builder = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .with_links(links);
    if let Some(at) = start {
        builder = builder.with_start_time(at);
    }
    Some(builder.start_with_context(tracer, &parent_context(parent)))
}

/// A span of `name`, child of `parent`, that starts and ends now (a point in the story: a
/// dead letter, a replay, a resend). Returns its context, to carry on.
pub fn instant(
    name: &'static str,
    parent: Option<&TraceContext>,
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
) -> Option<TraceContext> {
    let mut span = start(name, SpanKind::Internal, parent, None, attributes, links)?;
    let context = trace_context_of(span.span_context());
    span.end();
    context
}

/// Ends `span` as failed with `description` (no receiver text: a class or a status).
pub fn fail(span: &mut Span, description: String) {
    span.set_status(Status::error(description));
}

/// The span of a replay or a resend (`name`) of one delivery: an instant, child of the
/// delivery's trace context, linked to its last attempt. Returns its context, which the
/// new budget's first attempt links to.
pub fn budget_span(
    name: &'static str,
    message: &tern_core::DeliveryMessage,
) -> Option<TraceContext> {
    tracer()?;
    instant(
        name,
        message.trace.as_ref(),
        vec![
            KeyValue::new(keys::EVENT_ID, message.event.id.to_string()),
            KeyValue::new(keys::EVENT_TYPE, message.event.event_type.to_string()),
            KeyValue::new(keys::ENDPOINT_ID, message.endpoint_id.to_string()),
            KeyValue::new(keys::TENANT_ID, message.event.tenant_id.to_string()),
            KeyValue::new(keys::REPLAY_COUNT, i64::from(message.replay_count)),
        ],
        message.previous_attempt.iter().map(link).collect(),
    )
}
