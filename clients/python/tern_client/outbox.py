"""The transactional outbox item builder.

Write your business change and a Tern outbox item in one DynamoDB ``TransactWriteItems``:
both commit or neither does, so an event exists exactly when its business fact does. This
module builds the outbox ``Put`` (DynamoDB JSON, as boto3's low-level client takes it);
you add it to your own transaction. The item is the one of
clients/outbox/outbox-item.v2.schema.json, written exactly as the Rust writer
(``tern-outbox``) writes it: the vectors in clients/outbox/vectors are reproduced byte
for byte (tests/test_vectors.py)::

    writer = OutboxWriter("tern-outbox")
    event = writer.prepare(type="order.paid", tenant_id="tnt_acme",
                           payload='{"order_id":"o_1","amount":4200}')
    dynamodb.transact_write_items(TransactItems=[order_put, event.transact_item])
"""

from __future__ import annotations

import calendar
import datetime as dt
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from . import trace_context
from .json_text import JsonTextError, check_json_text


class _Current:
    """The type of :data:`CURRENT`."""

    def __repr__(self) -> str:
        return "CURRENT"


#: ``prepare(traceparent=CURRENT)`` (the default): the current OpenTelemetry span's context.
CURRENT = _Current()

#: Default payload limit, bytes: 262,144 (256 KiB, the classic SQS message size).
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
#: Default time an item stays in the outbox table before DynamoDB's TTL removes it: 7 days.
DEFAULT_TTL_DAYS = 7
#: Longest TTL, days (10 years); shorter than 1 day is raised to 1 (the stream keeps records 24 h).
MAX_TTL_DAYS = 3650
#: Longest event id, tenant id and event type, bytes (tern_core::ids::MAX_ID_LEN).
MAX_ID_LEN = 128
#: The schema version this builder writes (outbox-item.v2.schema.json): items keyed by
#: tenant and event id, so event ids are per tenant.
OUTBOX_SCHEMA_VERSION = 2
#: The condition on every outbox Put: an event id is never reused within its tenant.
CONDITION_EXPRESSION = "attribute_not_exists(event_id)"


def outbox_key(tenant_id: str, event_id: str) -> str:
    """The outbox table's key of a tenant's event (schema version 2):
    ``<tenant_id>#<event_id>``. The same id in two tenants is two items, two events."""
    return f"{tenant_id}#{event_id}"

_ID_RE = re.compile(r"[A-Za-z0-9_-]+")
_TYPE_RE = re.compile(r"[A-Za-z0-9._:-]+")
# Characters that count as padding around a payload: Rust's u8::is_ascii_whitespace.
_PADDING = " \t\n\r\f"
_UNSENDABLE = re.compile("[\ufffe\uffff]")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class OutboxError(ValueError):
    """An event the builder refuses. ``code`` is stable and the same in the Rust,
    TypeScript and Python builders: ``bad_event_id``, ``bad_tenant_id``,
    ``bad_event_type``, ``bad_created_at``, ``payload_not_json``, ``payload_not_object``,
    ``payload_too_large``, ``payload_padded``, ``payload_unsendable_character``,
    ``bad_traceparent``, ``bad_tracestate``. The message says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class PreparedEvent:
    """A validated event and its outbox item."""

    id: str
    type: str
    tenant_id: str
    created_at: dt.datetime
    payload: str
    #: The conditional Put (``TableName``, ``Item`` in DynamoDB JSON, ``ConditionExpression``).
    put: dict[str, Any]
    #: The W3C trace context the item carries, if any.
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def transact_item(self) -> dict[str, Any]:
        """The Put wrapped for ``transact_write_items(TransactItems=[...])``."""
        return {"Put": self.put}


def generate_event_id(now_ms: int | None = None) -> str:
    """A new event id: ``evt_`` and a UUIDv7 (RFC 9562 §5.7: 48-bit Unix milliseconds,
    version, variant, random) in hex."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    b = bytearray((ms & ((1 << 48) - 1)).to_bytes(6, "big") + os.urandom(10))
    b[6] = (b[6] & 0x0F) | 0x70
    b[8] = (b[8] & 0x3F) | 0x80
    return "evt_" + b.hex()


def _check_id(value: str, kind: str, code: str) -> None:
    if not value:
        raise OutboxError(code, f"{kind} is empty")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_LEN:
        raise OutboxError(
            code, f"{kind} is {size} bytes long; the limit is {MAX_ID_LEN}"
        )
    if not _ID_RE.fullmatch(value):
        raise OutboxError(
            code, f"{kind} may only hold ASCII letters, digits, '_' and '-'"
        )


def _utc_millis(created_at: dt.datetime | int | None) -> dt.datetime:
    """``created_at`` in UTC, truncated to the millisecond; raises bad_created_at."""
    try:
        if created_at is None:
            when = dt.datetime.now(dt.UTC)
        elif isinstance(created_at, dt.datetime):
            if created_at.tzinfo is None or created_at.utcoffset() is None:
                raise OutboxError(
                    "bad_created_at",
                    "created_at must be timezone-aware (e.g. datetime.now(timezone.utc))",
                )
            when = created_at.astimezone(dt.UTC)
        elif isinstance(created_at, int) and not isinstance(created_at, bool):
            when = _EPOCH + dt.timedelta(milliseconds=created_at)
        else:
            raise OutboxError(
                "bad_created_at",
                "created_at must be a datetime or Unix milliseconds (int)",
            )
    except (OverflowError, ValueError) as e:
        if isinstance(e, OutboxError):
            raise
        raise OutboxError(
            "bad_created_at",
            "created_at is outside the years 0001-9999 that RFC 3339 can write",
        ) from e
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


def _check_payload(text: str, limit: int) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise OutboxError(
            "payload_not_json", "payload holds a lone surrogate: it has no UTF-8 form"
        ) from e
    if size > limit:
        raise OutboxError(
            "payload_too_large",
            f"payload is {size} bytes; the limit is {limit} bytes. Send a reference instead: put the full "
            "data where the receiver can fetch it (for example an S3 object behind a presigned URL) and "
            'publish a small payload such as {"id":"...","url":"https://..."}',
        )
    if text and (text[0] in _PADDING or text[-1] in _PADDING):
        raise OutboxError(
            "payload_padded",
            "payload must start with '{' and end with '}' with no surrounding whitespace, so its bytes survive every hop unchanged",
        )
    try:
        check_json_text(text)
    except JsonTextError as e:
        raise OutboxError("payload_not_json", f"payload is not valid JSON: {e}") from e
    bad = _UNSENDABLE.search(text)
    if bad:
        cp = f"{ord(bad.group()):04X}"
        raise OutboxError(
            "payload_unsendable_character",
            f"payload holds the raw character U+{cp}, which SQS cannot carry; write it as the JSON escape \\u{cp} instead",
        )
    if text[0] != "{":
        raise OutboxError("payload_not_object", "payload must be a JSON object")


class OutboxWriter:
    """Builds outbox items for one outbox table.

    :param table: the outbox table (TERN_OUTBOX_TABLE; the stacks' OutboxTableName output)
    :param max_payload_bytes: payload limit, bytes; must match the relay's
        TERN_MAX_PAYLOAD_BYTES (default 262,144)
    :param ttl_days: days an item is kept, clamped to 1..=3650 (default 7)
    :raises TypeError: when either is not a whole number (ValueError: a negative limit)
    """

    def __init__(
        self,
        table: str,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        ttl_days: int = DEFAULT_TTL_DAYS,
    ) -> None:
        for name, value in (
            ("max_payload_bytes", max_payload_bytes),
            ("ttl_days", ttl_days),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be a whole number, got {value!r}")
        if max_payload_bytes < 0:
            raise ValueError(
                f"max_payload_bytes must not be negative, got {max_payload_bytes}"
            )
        self.table = table
        self.max_payload_bytes = max_payload_bytes
        self.ttl_days = min(max(ttl_days, 1), MAX_TTL_DAYS)

    def prepare(
        self,
        *,
        type: str,
        tenant_id: str,
        payload: str,
        id: str | None = None,
        created_at: dt.datetime | int | None = None,
        traceparent: str | None | _Current = CURRENT,
        tracestate: str | None = None,
    ) -> PreparedEvent:
        """Validates an event and builds its conditional Put.

        :param payload: the payload's exact JSON text (a JSON object), delivered byte for
            byte. Text, not a dict: ``json.dumps`` yours if you like.
        :param id: your event id (1-128 of ``A-Za-z0-9_-``); default ``evt_`` + a UUIDv7.
        :param created_at: an aware datetime, or Unix milliseconds; default now. Kept to
            the millisecond.
        :param traceparent: the W3C traceparent of the span that writes the event
            (version 00, lowercase hex): Tern's spans of the event join its trace. Default:
            the current OpenTelemetry span's, when the ``opentelemetry`` package is
            installed and a span is current; ``None``: none.
        :param tracestate: the W3C tracestate that goes with it (at most 512 characters,
            32 members).
        :raises OutboxError: with a stable ``code``, checked in this order: id, type,
            tenant, time, then the payload's size, padding, JSON, characters, object,
            then the traceparent and tracestate.
        """
        if id is not None:
            _check_id(id, "event id", "bad_event_id")
        if not (0 < len(type) <= MAX_ID_LEN and _TYPE_RE.fullmatch(type)):
            raise OutboxError(
                "bad_event_type",
                f"event type {type!r} is invalid: 1-128 characters of ASCII letters, digits, '.', '_', ':' or '-'",
            )
        _check_id(tenant_id, "tenant id", "bad_tenant_id")
        when = _utc_millis(created_at)
        seconds = calendar.timegm(when.utctimetuple())
        event_id = (
            generate_event_id(seconds * 1000 + when.microsecond // 1000)
            if id is None
            else id
        )
        _check_payload(payload, self.max_payload_bytes)
        if isinstance(traceparent, _Current):
            found = trace_context.current()
            traceparent, tracestate = found if found is not None else (None, None)
        if traceparent is not None:
            problem = trace_context.traceparent_problem(traceparent)
            if problem is not None:
                raise OutboxError("bad_traceparent", problem)
            if tracestate is not None:
                problem = trace_context.tracestate_problem(tracestate)
                if problem is not None:
                    raise OutboxError("bad_tracestate", problem)
        if traceparent is None or (tracestate is not None and not tracestate.strip()):
            tracestate = None
        # Rust: (created_at + ttl).timestamp(), whole seconds rounded down; timegm reads the
        # UTC time tuple, which has no fraction.
        expires_at = seconds + self.ttl_days * 86_400
        created_text = (
            f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}:"
            f"{when.second:02d}.{when.microsecond // 1000:03d}Z"
        )
        put = {
            "TableName": self.table,
            "Item": {
                "event_id": {"S": outbox_key(tenant_id, event_id)},
                "tern_record": {"S": "outbox_event"},
                "schema_version": {"N": str(OUTBOX_SCHEMA_VERSION)},
                "event_type": {"S": type},
                "tenant_id": {"S": tenant_id},
                "created_at": {"S": created_text},
                "payload": {"S": payload},
                "expires_at": {"N": str(expires_at)},
                **({"traceparent": {"S": traceparent}} if traceparent is not None else {}),
                **({"tracestate": {"S": tracestate}} if tracestate is not None else {}),
            },
            "ConditionExpression": CONDITION_EXPRESSION,
        }
        return PreparedEvent(
            id=event_id,
            type=type,
            tenant_id=tenant_id,
            created_at=when,
            payload=payload,
            put=put,
            traceparent=traceparent,
            tracestate=tracestate,
        )
