//! `PreparedEvent::with_current_trace_context` (feature `opentelemetry`): the event carries
//! the current OpenTelemetry span's W3C trace context, and nothing without one
//! (`cargo test -p tern-outbox --features opentelemetry --test current_trace`).
#![cfg(feature = "opentelemetry")]

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use tern_outbox::OutboxWriter;

#[test]
fn the_current_span_becomes_the_events_parent() {
    let writer = OutboxWriter::new("tern-outbox");
    let untraced = writer
        .prepare("order.paid", "tnt_acme", "{}")
        .expect("event")
        .with_current_trace_context();
    assert_eq!(untraced.event.trace, None, "no current span, no context");

    let span = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("trace id"),
        SpanId::from_hex("00f067aa0ba902b7").expect("span id"),
        TraceFlags::SAMPLED,
        false,
        "rojo=00f067aa0ba902b7"
            .parse::<TraceState>()
            .expect("state"),
    );
    let _guard = opentelemetry::Context::new()
        .with_remote_span_context(span)
        .attach();
    let traced = writer
        .prepare("order.paid", "tnt_acme", "{}")
        .expect("event")
        .with_current_trace_context();
    let trace = traced.event.trace.as_ref().expect("a trace context");
    assert_eq!(
        trace.traceparent().to_string(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    );
    assert_eq!(trace.tracestate(), Some("rojo=00f067aa0ba902b7"));
}
