"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` and
``tracestate`` an event carries, so that Tern's spans of it (the relay's fan-out, every
attempt, the dead letter, a replay) join the trace of the code that wrote it. The same
rules as ``tern_core::trace_context`` (Rust) and ``src/trace.ts`` (TypeScript).

:func:`current` reads the caller's current OpenTelemetry span when the ``opentelemetry``
API package is installed (optional: without it, or without a recording span, there is no
context and the event starts a trace of its own).
"""

from __future__ import annotations

import re

#: Length of a version 00 traceparent: 55 characters (W3C Trace Context §3.2.2).
TRACEPARENT_LENGTH = 55
#: Longest tracestate: 512 characters (W3C Trace Context §3.3.1.1).
MAX_TRACESTATE_LENGTH = 512
#: Most tracestate members: 32 (W3C Trace Context §3.3.1.1).
MAX_TRACESTATE_MEMBERS = 32

_TRACEPARENT_RE = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_KEY_RE = re.compile(
    r"[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}"
)
_VALUE_RE = re.compile(
    r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)


def traceparent_problem(value: str) -> str | None:
    """Why a traceparent is refused, or ``None`` when it is valid."""
    if len(value) != TRACEPARENT_LENGTH:
        return (
            f"traceparent must be {TRACEPARENT_LENGTH} bytes (00-<32 hex trace id>-<16 hex "
            f"parent id>-<2 hex flags>), found {len(value.encode('utf-8', 'surrogatepass'))}"
        )
    m = _TRACEPARENT_RE.fullmatch(value)
    if m is None:
        if re.fullmatch(r"[0-9a-f]{2}-.*", value) and not value.startswith("00-"):
            return f"traceparent version {value[:2]!r} is not supported (only 00, W3C Trace Context §3.2.2.1)"
        return "traceparent must be 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags> in lowercase hex"
    if set(m.group(1)) == {"0"}:
        return "traceparent trace id is all zeros, which W3C Trace Context forbids"
    if set(m.group(2)) == {"0"}:
        return "traceparent parent id is all zeros, which W3C Trace Context forbids"
    return None


def tracestate_problem(value: str) -> str | None:
    """Why a tracestate is refused, or ``None`` when it is valid."""
    if len(value) > MAX_TRACESTATE_LENGTH:
        return f"tracestate is {len(value)} characters; the limit is {MAX_TRACESTATE_LENGTH} (W3C Trace Context §3.3.1.1)"
    members = 0
    for index, member in enumerate(value.split(","), start=1):
        member = member.strip(" \t")
        if not member:
            continue
        members += 1
        key, eq, val = member.partition("=")
        if not eq or not _KEY_RE.fullmatch(key) or not _VALUE_RE.fullmatch(val):
            return (
                f"tracestate member {index} is not key=value (key: lowercase letters, digits, "
                "_-*/ and one optional @; value: printable ASCII without , or =)"
            )
    if members > MAX_TRACESTATE_MEMBERS:
        return f"tracestate has {members} members; the limit is {MAX_TRACESTATE_MEMBERS} (W3C Trace Context §3.3.1.1)"
    return None


def current() -> tuple[str, str | None] | None:
    """``(traceparent, tracestate or None)`` of the current OpenTelemetry span, or ``None``
    when the ``opentelemetry`` package is not installed or no valid span is current."""
    try:
        from opentelemetry import trace  # optional dependency
    except ImportError:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags) & 0xFF:02x}"
    if traceparent_problem(traceparent) is not None:
        return None
    state = context.trace_state.to_header() if context.trace_state else ""
    return traceparent, (state if state and tracestate_problem(state) is None else None)
