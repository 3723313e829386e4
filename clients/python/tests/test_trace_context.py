"""The W3C trace context an outbox item carries (docs/tracing.md): the builder takes the
current OpenTelemetry span's when none is given, checks one that is given with the same
rules as the Rust writer, and writes none when told so."""

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from tern_client import OutboxError, OutboxWriter, trace_context

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def prepare(**kwargs):
    return OutboxWriter("tern-outbox").prepare(
        type="order.paid", tenant_id="tnt_acme", payload='{"a":1}', **kwargs
    )


def test_the_current_span_is_the_default_parent() -> None:
    span = NonRecordingSpan(
        SpanContext(
            TRACE_ID,
            SPAN_ID,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=TraceState([("rojo", "00f067aa0ba902b7")]),
        )
    )
    with trace.use_span(span):
        event = prepare()
    assert event.traceparent == TRACEPARENT
    assert event.put["Item"]["traceparent"] == {"S": TRACEPARENT}
    assert event.put["Item"]["tracestate"] == {"S": "rojo=00f067aa0ba902b7"}
    with trace.use_span(span):
        untraced = prepare(traceparent=None)
    assert "traceparent" not in untraced.put["Item"]


def test_without_a_current_span_there_is_none() -> None:
    assert trace_context.current() is None
    assert "traceparent" not in prepare().put["Item"]


@pytest.mark.parametrize(
    "traceparent, tracestate, code",
    [
        ("01" + TRACEPARENT[2:], None, "bad_traceparent"),
        (TRACEPARENT.upper(), None, "bad_traceparent"),
        ("00-" + "0" * 32 + TRACEPARENT[35:], None, "bad_traceparent"),
        (TRACEPARENT, "Rojo=1", "bad_tracestate"),
    ],
)
def test_a_bad_context_is_refused(traceparent, tracestate, code) -> None:
    with pytest.raises(OutboxError) as refused:
        prepare(traceparent=traceparent, tracestate=tracestate)
    assert refused.value.code == code
