"""The outbox test vectors (clients/outbox/vectors): this builder reproduces every one
byte for byte, as the Rust writer and the TypeScript builder do, and every item it builds
is valid under outbox-item.v2.schema.json (jsonschema, draft 2020-12)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import pathlib
import time

import jsonschema
import pytest
import referencing
from tern_client import OutboxError, OutboxWriter, canonical_json

OUTBOX = pathlib.Path(__file__).resolve().parents[2] / "outbox"
SCHEMA = json.loads((OUTBOX / "outbox-item.v2.schema.json").read_text("utf-8"))
VECTORS = sorted((OUTBOX / "vectors").glob("*.json"))
ITEM = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.FormatChecker()
)
PUT = jsonschema.Draft202012Validator(
    {"$ref": "urn:tern:outbox-item:v2#/$defs/transactWriteItem"},
    registry=referencing.Registry().with_resource(
        SCHEMA["$id"], referencing.Resource.from_contents(SCHEMA)
    ),
)


def payload_of(vector_input: dict) -> str:
    p = vector_input["payload"]
    return (
        p if isinstance(p, str) else p["prefix"] + p["unit"] * p["count"] + p["suffix"]
    )


def test_the_schema_is_valid_and_the_vectors_are_there() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert len(VECTORS) >= 30


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector(path: pathlib.Path) -> None:
    vector = json.loads(path.read_text("utf-8"))
    inp, expected = vector["input"], vector["expected"]
    kwargs = {}
    if "ttl_days" in inp:
        kwargs["ttl_days"] = inp["ttl_days"]
    if "max_payload_bytes" in inp:
        kwargs["max_payload_bytes"] = inp["max_payload_bytes"]
    writer = OutboxWriter(inp["table"], **kwargs)
    trace = {"traceparent": inp.get("traceparent"), "tracestate": inp.get("tracestate")}

    def build():
        return writer.prepare(
            id=inp["event_id"],
            type=inp["event_type"],
            tenant_id=inp["tenant_id"],
            created_at=inp["created_at_unix_ms"],
            payload=payload_of(inp),
            **trace,
        )

    if "error" in expected:
        with pytest.raises(OutboxError) as refused:
            build()
        assert refused.value.code == expected["error"], str(refused.value)
        return
    prepared = build()
    data = canonical_json(prepared.transact_item)
    assert len(data) == expected["canonical_length"]
    assert hashlib.sha256(data).hexdigest() == expected["canonical_sha256"]
    if "transact_write_item" in expected:
        assert data == canonical_json(expected["transact_write_item"])
        assert prepared.transact_item == expected["transact_write_item"]
    ITEM.validate(prepared.put["Item"])
    PUT.validate(prepared.transact_item)


def test_the_schema_refuses_items_no_builder_writes() -> None:
    good = (
        OutboxWriter("t")
        .prepare(type="a.b", tenant_id="tnt_a", payload="{}")
        .put["Item"]
    )
    ITEM.validate(good)
    for change in (
        {"schema_version": {"N": "1"}},
        {"schema_version": {"N": "3"}},
        {"event_id": {"S": "evt.1"}},
        # Version 2 keys name the tenant: a bare id is a version 1 key.
        {"event_id": {"S": "evt_1"}},
        {"event_id": {"S": "tnt_a#evt_1#x"}},
        {"payload": {"S": "[1]"}},
        {"expires_at": {"S": "1"}},
        {"created_at": {"S": "2026-12-01T14:35:00Z"}},
        {"extra": {"S": "x"}},
    ):
        assert not ITEM.is_valid({**good, **change}), change


def test_times_as_datetimes() -> None:
    """An aware datetime in any zone is the same instant in UTC; a naive one is refused."""
    writer = OutboxWriter("t")
    paris = dt.timezone(dt.timedelta(hours=1))
    a = writer.prepare(
        type="a.b",
        tenant_id="tnt_a",
        payload="{}",
        id="e1",
        created_at=dt.datetime(2026, 12, 1, 15, 35, 0, 123999, tzinfo=paris),
    )
    b = writer.prepare(
        type="a.b", tenant_id="tnt_a", payload="{}", id="e1", created_at=1796135700123
    )
    assert a.put == b.put
    with pytest.raises(OutboxError) as naive:
        writer.prepare(
            type="a.b",
            tenant_id="tnt_a",
            payload="{}",
            created_at=dt.datetime(2026, 12, 1),
        )
    assert naive.value.code == "bad_created_at"


def test_a_new_event_gets_a_time_ordered_id() -> None:
    writer = OutboxWriter("t")
    before = int(time.time() * 1000)
    a = writer.prepare(type="a.b", tenant_id="tnt_a", payload="{}")
    b = writer.prepare(type="a.b", tenant_id="tnt_a", payload="{}")
    assert a.id != b.id
    assert a.id.startswith("evt_") and len(a.id) == 36 and a.id[16] == "7"
    assert before - 1 <= int(a.id[4:16], 16) <= int(time.time() * 1000)


def test_what_the_vectors_cannot_hold() -> None:
    """A lone surrogate in the text (no UTF-8 form), a time datetime cannot hold, a
    non-integer option, a time of another type."""
    writer = OutboxWriter("t")
    with pytest.raises(OutboxError) as lone:
        writer.prepare(type="a.b", tenant_id="tnt_a", payload='{"a":"\ud800"}')
    assert lone.value.code == "payload_not_json"
    with pytest.raises(OutboxError) as far:
        writer.prepare(
            type="a.b", tenant_id="tnt_a", payload="{}", created_at=253402300800000
        )
    assert far.value.code == "bad_created_at"
    with pytest.raises(OutboxError) as wrong_type:
        writer.prepare(
            type="a.b", tenant_id="tnt_a", payload="{}", created_at="2026-12-01"
        )  # type: ignore[arg-type]
    assert wrong_type.value.code == "bad_created_at"
    for bad in (
        {"ttl_days": 1.5},
        {"ttl_days": True},
        {"max_payload_bytes": -1},
        {"max_payload_bytes": 2.0},
    ):
        with pytest.raises((TypeError, ValueError)):
            OutboxWriter("t", **bad)
