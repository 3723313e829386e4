"""The facade (``tern_client.Tern``) against a real HTTP server on 127.0.0.1: every method
once, checking the request the server received (method, path with the ids
percent-encoded, query, body, a SigV4 signature) and the model it returns; then a problem
answer, which every method raises as ``TernApiError``. The canned answers are valid under
the OpenAPI document's schemas (jsonschema), and the document is walked so that an
operation with no facade method, a facade method on the wrong route, or a facade method
whose keywords differ from the generated call's body or query fails here."""

from __future__ import annotations

import datetime
import http.server
import importlib
import inspect
import json
import pathlib
import pkgutil
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import attrs
import jsonschema
import pytest
import referencing
import tern_api.api
import tern_api.models
from botocore.credentials import Credentials
from referencing.jsonschema import DRAFT202012
from tern_client import Tern, TernApiError
from tern_client.facade import DeadLetters, Endpoints, Events, Portal

SPEC = pathlib.Path(__file__).resolve().parents[3] / "shared" / "tern-api" / "openapi.json"
DOC = json.loads(SPEC.read_text(encoding="utf-8"))
METHODS = {"get", "put", "post", "patch", "delete", "head", "options", "trace"}


@dataclass
class Operation:
    operation_id: str
    method: str
    template: str
    #: The lowest 2xx status of the document and its JSON schema (None for a 204).
    status: int
    schema: str | None


def operations() -> dict[str, Operation]:
    found = {}
    for template, item in DOC["paths"].items():
        for method, op in item.items():
            if method not in METHODS or "operationId" not in op:
                continue
            status = min(int(s) for s in op["responses"] if 200 <= int(s) < 300)
            content = op["responses"][str(status)].get("content", {})
            ref = content.get("application/json", {}).get("schema", {}).get("$ref")
            found[op["operationId"]] = Operation(
                op["operationId"],
                method.upper(),
                template,
                status,
                ref.removeprefix("#/components/schemas/") if ref else None,
            )
    return found


OPERATIONS = operations()
REGISTRY = referencing.Registry().with_resource(
    "urn:tern:openapi",
    referencing.Resource.from_contents(
        {"components": DOC["components"]}, default_specification=DRAFT202012
    ),
)


def assert_valid(schema: str, value: Any) -> None:
    jsonschema.Draft202012Validator(
        {"$ref": f"urn:tern:openapi#/components/schemas/{schema}"}, registry=REGISTRY
    ).validate(value)


# Answers as the API gives them, one per success schema.
T0 = "2026-12-01T09:00:00Z"
PUBLIC_KEY = "whpk_MLJvOi3VgJcUO1WJtUxD1hQcGqgLDTvnxOmnbP3gGZk="
ENDPOINT = {
    "id": "ep_1",
    "tenant_id": "tnt_acme",
    "url": "https://hooks.example/tern",
    "event_types": ["order.paid"],
    "enabled": True,
    "payload_format": "raw",
    "send_traceparent": False,
    "secrets": [
        {"fingerprint": "sha256:5f2c0a1b2c3d", "state": "current", "created_at": T0}
    ],
    "signatures": "both",
    "signing_keys": [
        {"public_key": PUBLIC_KEY, "state": "current", "created_at": T0, "expires_at": None}
    ],
    "headers": [
        {"name": "x-tenant", "value": "acme", "secret": False},
        {"name": "x-api-key", "value": None, "secret": True},
    ],
    "auth": {"type": "bearer", "secret": "token"},
    "created_at": T0,
}
REPLAY_REPORT = {
    "dry_run": False,
    "examined": 2,
    "matched": 1,
    "replayed": 1,
    "already_replayed": 0,
    "delivery_ids": ["evt_1.ep_1"],
    "stopped": "queue_empty",
}
RESEND = {
    "event_id": "evt_1",
    "endpoint_id": "ep_1",
    "replay_count": 1,
    "previous_state": "dead_lettered",
}
FIXTURES: dict[str, dict[str, Any]] = {
    "Endpoint": ENDPOINT,
    "EndpointCreated": {"endpoint": ENDPOINT, "secret": "whsec_c2VjcmV0"},
    "EndpointList": {"items": [ENDPOINT], "next_cursor": None},
    "RotatedSecret": {"endpoint": ENDPOINT, "secret": "whsec_bmV3"},
    "RotatedSigningKey": {"endpoint": ENDPOINT, "public_key": PUBLIC_KEY},
    "TestSend": {
        "event_id": "evt_test",
        "event_type": "tern.test",
        "delivered": True,
        "status": 204,
        "latency_ms": 12,
        "excerpt_truncated": False,
    },
    "EndpointHealth": {
        "endpoint_id": "ep_1",
        "state": "healthy",
        "attempts_window": 3,
        "attempts_24h": 10,
        "window_seconds": 3600,
        "consecutive_failures": 0,
        "success_rate_window": 1.0,
        "last_failure": {"at": T0, "status": 503, "response_excerpt": "busy"},
        "waiting": 2,
        "waiting_complete": True,
        "report_pending": False,
        "pace": {"per_second": 5, "changed_at": T0, "slow_start": False},
    },
    "EndpointAttemptList": {
        "items": [
            {
                "event_id": "evt_1",
                "endpoint_id": "ep_1",
                "replay_count": 0,
                "attempt": 1,
                "takeover": 0,
                "started_at": T0,
                "latency_ms": 8,
                "outcome": "delivered",
                "status": 200,
            }
        ],
        "next_cursor": "c_2",
    },
    "RecoverReport": {
        "endpoint_id": "ep_1",
        "since": T0,
        "until": "2026-12-01T11:00:00Z",
        "enabled": True,
        "dead_letters": REPLAY_REPORT,
        "waiting": {
            "attempts_examined": 1,
            "still_waiting": 1,
            "resent": [RESEND],
            "not_resendable": [],
            "complete": True,
        },
    },
    "PublishedEvent": {
        "id": "evt_1",
        "type": "order.paid",
        "tenant_id": "tnt_acme",
        "created_at": T0,
        "created": True,
    },
    "PublishedEventBatch": {
        "results": [
            {
                "id": "evt_1",
                "status": 202,
                "event": {
                    "id": "evt_1",
                    "type": "order.paid",
                    "tenant_id": "tnt_acme",
                    "created_at": T0,
                    "created": True,
                },
            },
            {
                "id": "evt_2",
                "status": 409,
                "problem": {
                    "type": "urn:tern:problem:event-id-conflict",
                    "title": "Event id already used",
                    "status": 409,
                    "detail": "event id evt_2 is already used by a different event",
                    "field": "events[1].id",
                },
            },
        ],
        "created": 1,
        "existing": 0,
        "failed": 1,
    },
    "Event": {
        "id": "evt_1",
        "tenant_id": "tnt_acme",
        "type": "order.paid",
        "created_at": T0,
        "payload": {"order_id": "o_1", "amount": 4200},
        "deliveries": [
            {
                "endpoint_id": "ep_1",
                "state": "delivered",
                "attempt": 1,
                "replay_count": 0,
                "delivered_at": T0,
            }
        ],
    },
    "EventAttempts": {
        "event_id": "evt_1",
        "attempts": [
            {
                "endpoint_id": "ep_1",
                "replay_count": 0,
                "attempt": 1,
                "takeover": 0,
                "started_at": T0,
                "latency_ms": 8,
                "outcome": "delivered",
                "status": 200,
                "excerpt_truncated": False,
            }
        ],
        "dead_letters": [],
    },
    "Resend": RESEND,
    "DeadLetterGroups": {
        "read": 1,
        "matched": 1,
        "truncated": False,
        "groups": [
            {
                "endpoint_id": "ep_1",
                "reason": "exhausted",
                "count": 1,
                "sample": {
                    "reason": "exhausted",
                    "event_id": "evt_1",
                    "payload_sample": "{}",
                    "payload_truncated": False,
                },
            }
        ],
    },
    "ReplayReport": REPLAY_REPORT,
    "PortalSession": {
        "url": "https://portal.example/portal/start?token=t",
        "session_id": "ps_1",
        "expires_at": T0,
    },
}
PROBLEM = {
    "type": "urn:tern:problem:not-found",
    "title": "Not found",
    "status": 404,
    "detail": "no such endpoint",
    "field": None,
}


@dataclass
class Answer:
    status: int
    content_type: str | None = None
    body: Any = None


@dataclass
class Received:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    base_url: str
    received: list[Received] = field(default_factory=list)
    answer: Answer = field(default_factory=lambda: Answer(500))


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    state = Server("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def handle_any(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            state.received.append(
                Received(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
            )
            answer = state.answer
            self.send_response(answer.status)
            if answer.body is None:
                self.end_headers()
                return
            text = (
                answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
            )
            self.send_header("content-type", answer.content_type or "application/json")
            self.send_header("content-length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        do_GET = do_POST = do_PATCH = do_DELETE = handle_any

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    # A base path and a trailing slash, as an ApiUrl output has them.
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/prod/"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def facade(server: Server) -> Tern:
    return Tern(server.base_url, "us-east-1", Credentials("AKIDFACADETEST", "secret"))


# Ids that need percent-encoding, and what they become in the path.
TENANT, TENANT_PATH = "tnt a/1", "tnt%20a%2F1"
EP, EP_PATH = "ep?#2", "ep%3F%232"
EV, EV_PATH = "evt é+3", "evt%20%C3%A9%2B3"

SINCE = datetime.datetime(2026, 12, 1, 9, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
UNTIL = datetime.datetime(2026, 12, 1, 11, tzinfo=datetime.UTC)
PAYLOAD = {"order_id": "o_1", "amount": 4200, "lines": [{"sku": "a"}], "note": None}


@dataclass
class Case:
    #: The facade method, ``group.name``.
    facade: str
    operation_id: str
    call: Callable[[Tern], Any]
    #: The path after /prod, ids encoded.
    path: str
    query: dict[str, str] = field(default_factory=dict)
    #: The JSON body sent; None: no body.
    body: Any = None
    #: For a POST: the same call with ``idempotency_key=`` (every POST method takes it).
    keyed: Callable[[Tern, str], Any] | None = None


CASES = [
    Case(
        "endpoints.list",
        "listEndpoints",
        lambda t: t.endpoints.list(TENANT, state="enabled", limit=10, cursor="c/1"),
        f"/v1/tenants/{TENANT_PATH}/endpoints",
        {"state": "enabled", "limit": "10", "cursor": "c/1"},
    ),
    Case(
        "endpoints.create",
        "createEndpoint",
        lambda t: t.endpoints.create(
            TENANT,
            url="https://hooks.example/tern",
            event_types=["order.paid"],
            description=None,
            payload_format="standard_webhooks",
            max_per_second=10,
            headers=[
                {"name": "X-Api-Key", "value": "k-1", "secret": True},
                tern_api.models.CustomHeaderSetting(name="X-Tenant", value="acme"),
            ],
            auth={"type": "bearer", "token": "t-1"},
            signatures="both",
        ),
        f"/v1/tenants/{TENANT_PATH}/endpoints",
        body={
            "url": "https://hooks.example/tern",
            "event_types": ["order.paid"],
            "description": None,
            "payload_format": "standard_webhooks",
            "max_per_second": 10,
            "headers": [
                {"name": "X-Api-Key", "value": "k-1", "secret": True},
                {"name": "X-Tenant", "value": "acme"},
            ],
            "auth": {"type": "bearer", "token": "t-1"},
            "signatures": "both",
        },
        keyed=lambda t, k: t.endpoints.create(
            TENANT, url="https://hooks.example/tern", idempotency_key=k
        ),
    ),
    Case(
        "endpoints.get",
        "getEndpoint",
        lambda t: t.endpoints.get(TENANT, EP),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}",
    ),
    Case(
        "endpoints.update",
        "updateEndpoint",
        lambda t: t.endpoints.update(
            TENANT,
            EP,
            url="https://hooks.example/v2",
            max_per_second=None,
            # The secret header and the client secret kept: left out.
            headers=[{"name": "x-api-key", "secret": True}],
            auth=tern_api.models.AuthOauth2ClientCredentials(
                type_=tern_api.models.AuthOauth2ClientCredentialsType.OAUTH2_CLIENT_CREDENTIALS,
                token_url="https://auth.example/token",
                client_id="tern",
            ),
            signatures=None,
        ),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}",
        body={
            "url": "https://hooks.example/v2",
            "max_per_second": None,
            "headers": [{"name": "x-api-key", "secret": True}],
            "auth": {
                "type": "oauth2_client_credentials",
                "token_url": "https://auth.example/token",
                "client_id": "tern",
            },
            "signatures": None,
        },
    ),
    Case(
        "endpoints.delete",
        "deleteEndpoint",
        lambda t: t.endpoints.delete(TENANT, EP),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}",
    ),
    Case(
        "endpoints.enable",
        "enableEndpoint",
        lambda t: t.endpoints.enable(TENANT, EP),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/enable",
        keyed=lambda t, k: t.endpoints.enable(TENANT, EP, idempotency_key=k),
    ),
    Case(
        "endpoints.disable",
        "disableEndpoint",
        lambda t: t.endpoints.disable(TENANT, EP, reason="customer asked"),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/disable",
        body={"reason": "customer asked"},
        keyed=lambda t, k: t.endpoints.disable(
            TENANT, EP, reason="customer asked", idempotency_key=k
        ),
    ),
    Case(
        "endpoints.rotate_secret",
        "rotateEndpointSecret",
        lambda t: t.endpoints.rotate_secret(TENANT, EP, overlap_hours=2),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/rotate-secret",
        body={"overlap_hours": 2},
        keyed=lambda t, k: t.endpoints.rotate_secret(
            TENANT, EP, overlap_hours=2, idempotency_key=k
        ),
    ),
    Case(
        "endpoints.rotate_signing_key",
        "rotateEndpointSigningKey",
        lambda t: t.endpoints.rotate_signing_key(TENANT, EP, overlap_hours=2),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/rotate-signing-key",
        body={"overlap_hours": 2},
        keyed=lambda t, k: t.endpoints.rotate_signing_key(
            TENANT, EP, overlap_hours=2, idempotency_key=k
        ),
    ),
    Case(
        "endpoints.test",
        "sendTestEvent",
        lambda t: t.endpoints.test(TENANT, EP),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/test",
        keyed=lambda t, k: t.endpoints.test(TENANT, EP, idempotency_key=k),
    ),
    Case(
        "endpoints.health",
        "getEndpointHealth",
        lambda t: t.endpoints.health(TENANT, EP),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/health",
    ),
    Case(
        "endpoints.attempts",
        "listEndpointAttempts",
        lambda t: t.endpoints.attempts(
            TENANT, EP, since=SINCE, until=UNTIL, outcome="failed", limit=5, cursor="c_1"
        ),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/attempts",
        {
            "since": "2026-12-01T09:00:00+01:00",
            "until": "2026-12-01T11:00:00+00:00",
            "outcome": "failed",
            "limit": "5",
            "cursor": "c_1",
        },
    ),
    Case(
        "endpoints.recover",
        "recoverEndpoint",
        lambda t: t.endpoints.recover(TENANT, EP, since=UNTIL, enable=True),
        f"/v1/tenants/{TENANT_PATH}/endpoints/{EP_PATH}/recover",
        body={"since": "2026-12-01T11:00:00+00:00", "enable": True},
        keyed=lambda t, k: t.endpoints.recover(
            TENANT, EP, since=UNTIL, enable=True, idempotency_key=k
        ),
    ),
    Case(
        "events.publish",
        "publishEvent",
        lambda t: t.events.publish(
            TENANT, type="order.paid", payload=PAYLOAD, id="evt_o_1_paid"
        ),
        f"/v1/tenants/{TENANT_PATH}/events",
        body={"type": "order.paid", "payload": PAYLOAD, "id": "evt_o_1_paid"},
        keyed=lambda t, k: t.events.publish(
            TENANT, type="order.paid", payload=PAYLOAD, idempotency_key=k
        ),
    ),
    Case(
        "events.publish_batch",
        "publishEventBatch",
        lambda t: t.events.publish_batch(
            TENANT,
            events=[
                {"type": "order.paid", "payload": PAYLOAD, "id": "evt_o_1_paid"},
                tern_api.models.NewEvent(
                    type_="order.shipped",
                    payload=tern_api.models.NewEventPayload.from_dict({"order_id": "o_1"}),
                ),
            ],
        ),
        f"/v1/tenants/{TENANT_PATH}/event-batches",
        body={
            "events": [
                {"type": "order.paid", "payload": PAYLOAD, "id": "evt_o_1_paid"},
                {"type": "order.shipped", "payload": {"order_id": "o_1"}},
            ]
        },
        keyed=lambda t, k: t.events.publish_batch(
            TENANT, events=[{"type": "order.paid", "payload": PAYLOAD}], idempotency_key=k
        ),
    ),
    Case(
        "events.get",
        "getEvent",
        lambda t: t.events.get(TENANT, EV),
        f"/v1/tenants/{TENANT_PATH}/events/{EV_PATH}",
    ),
    Case(
        "events.attempts",
        "listEventAttempts",
        lambda t: t.events.attempts(TENANT, EV),
        f"/v1/tenants/{TENANT_PATH}/events/{EV_PATH}/attempts",
    ),
    Case(
        "events.resend",
        "resendEvent",
        lambda t: t.events.resend(TENANT, EV, EP),
        f"/v1/tenants/{TENANT_PATH}/events/{EV_PATH}/endpoints/{EP_PATH}/resend",
        keyed=lambda t, k: t.events.resend(TENANT, EV, EP, idempotency_key=k),
    ),
    Case(
        "dead_letters.list",
        "listDeadLetters",
        lambda t: t.dead_letters.list(TENANT, max=50),
        f"/v1/tenants/{TENANT_PATH}/dead-letters",
        {"max": "50"},
    ),
    Case(
        "dead_letters.replay",
        "replayDeadLetters",
        lambda t: t.dead_letters.replay(
            TENANT, endpoint_id="ep_1", reason="exhausted", dry_run=True
        ),
        f"/v1/tenants/{TENANT_PATH}/dead-letters/replay",
        body={"endpoint_id": "ep_1", "reason": "exhausted", "dry_run": True},
        keyed=lambda t, k: t.dead_letters.replay(TENANT, dry_run=True, idempotency_key=k),
    ),
    Case(
        "portal.create_session",
        "createPortalSession",
        lambda t: t.portal.create_session(
            TENANT, endpoint_ids=["ep_1"], read_only=True, expires_in_seconds=600
        ),
        f"/v1/tenants/{TENANT_PATH}/portal-sessions",
        body={"endpoint_ids": ["ep_1"], "read_only": True, "expires_in_seconds": 600},
        keyed=lambda t, k: t.portal.create_session(TENANT, read_only=True, idempotency_key=k),
    ),
]

GROUPS = {
    "endpoints": Endpoints,
    "events": Events,
    "dead_letters": DeadLetters,
    "portal": Portal,
}
AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=AKIDFACADETEST/\d{8}/us-east-1/execute-api/aws4_request,"
    r" SignedHeaders=[^,]*\bhost\b"
)


def only(server: Server, before: int) -> Received:
    assert len(server.received) == before + 1, "one request per call"
    return server.received[-1]


def generated_call(operation_id: str) -> Callable[..., Any]:
    """The generated ``sync_detailed`` of an operation: ``tern_api.api.<tag>.<snake_id>``."""
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()
    for tag in pkgutil.iter_modules(tern_api.api.__path__):
        try:
            module = importlib.import_module(f"tern_api.api.{tag.name}.{name}")
        except ModuleNotFoundError:
            continue
        return module.sync_detailed
    raise AssertionError(f"no generated module for {operation_id}")


def method_of(case: Case) -> Callable[..., Any]:
    group, name = case.facade.split(".")
    return getattr(GROUPS[group], name)


def test_every_operation_has_a_facade_method_and_every_method_one_operation() -> None:
    assert sorted(c.operation_id for c in CASES) == sorted(OPERATIONS), (
        "operations without a facade method (or gone from the document)"
    )
    public = sorted(
        f"{group}.{name}"
        for group, cls in GROUPS.items()
        for name, _ in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    )
    assert public == sorted(c.facade for c in CASES), "facade methods without a case"
    t = Tern("http://127.0.0.1:9", "us-east-1", Credentials("a", "b"))
    for group, cls in GROUPS.items():
        assert isinstance(getattr(t, group), cls)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.facade)
def test_facade_keywords_are_the_generated_call_s(case: Case) -> None:
    """The same path ids in the same order, and as keywords exactly the generated call's
    query parameters or its body model's fields (``type_``, ``max_``: without the ``_``)."""
    generated = inspect.signature(generated_call(case.operation_id)).parameters
    mine = list(inspect.signature(method_of(case)).parameters.values())[1:]  # self
    positional = [p.name for p in generated.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert [p.name for p in mine if p.kind is p.POSITIONAL_OR_KEYWORD] == positional
    expected = {
        n.removesuffix("_")
        for n, p in generated.items()
        if p.kind is p.KEYWORD_ONLY and n not in ("client", "body")
    }
    if "body" in generated:
        model = generated["body"].annotation
        expected |= {f.name.removesuffix("_") for f in attrs.fields(model)}
    assert {p.name for p in mine if p.kind is p.KEYWORD_ONLY} == expected


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.facade)
def test_facade_method_sends_its_operation_and_returns_the_model(
    server: Server, case: Case
) -> None:
    op = OPERATIONS[case.operation_id]
    canned = None
    if op.schema is not None:
        canned = FIXTURES[op.schema]
        assert_valid(op.schema, canned)
    server.answer = Answer(op.status, "application/json", canned)
    count = len(server.received)

    result = case.call(facade(server))

    got = only(server, count)
    if op.schema is None:
        assert result is None
    else:
        model = getattr(tern_api.models, op.schema)
        assert isinstance(result, model)
        assert result == model.from_dict(canned)
    assert got.method == op.method
    path, _, query = got.target.partition("?")
    assert path == f"/prod{case.path}"
    # The document's route with these ids in it: the method calls the operation it claims.
    from_doc = (
        op.template.replace("{tenant_id}", TENANT_PATH)
        .replace("{endpoint_id}", EP_PATH)
        .replace("{event_id}", EV_PATH)
    )
    assert case.path == from_doc
    assert dict(urllib.parse.parse_qsl(query, keep_blank_values=True)) == case.query
    if case.body is None:
        assert got.body == b""
        assert "content-type" not in got.headers
    else:
        assert json.loads(got.body) == case.body
        assert got.headers["content-type"] == "application/json"
    assert AUTHORIZATION.match(got.headers["authorization"]), got.headers["authorization"]
    assert re.fullmatch(r"\d{8}T\d{6}Z", got.headers["x-amz-date"])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.facade)
def test_a_problem_answer_raises_tern_api_error(server: Server, case: Case) -> None:
    assert_valid("Problem", PROBLEM)
    server.answer = Answer(404, "application/problem+json", PROBLEM)
    with pytest.raises(TernApiError) as raised:
        case.call(facade(server))
    assert raised.value.status == 404
    assert raised.value.problem is not None
    assert raised.value.problem.type_ == "urn:tern:problem:not-found"
    assert raised.value.problem.detail == "no such endpoint"


def test_optional_bodies_are_sent_as_an_empty_object(server: Server) -> None:
    t = facade(server)
    calls: list[tuple[Callable[[], Any], str]] = [
        (lambda: t.endpoints.disable(TENANT, EP), "Endpoint"),
        (lambda: t.endpoints.rotate_secret(TENANT, EP), "RotatedSecret"),
        (lambda: t.endpoints.rotate_signing_key(TENANT, EP), "RotatedSigningKey"),
        (lambda: t.dead_letters.replay(TENANT), "ReplayReport"),
        (lambda: t.portal.create_session(TENANT), "PortalSession"),
        # No id: none sent, the API makes one.
        (lambda: t.events.publish(TENANT, type="t", payload={}), "PublishedEvent"),
    ]
    for call, schema in calls:
        server.answer = Answer(200, "application/json", FIXTURES[schema])
        count = len(server.received)
        call()
        body = json.loads(only(server, count).body)
        assert body == ({"type": "t", "payload": {}} if schema == "PublishedEvent" else {})


def test_enum_arguments_take_their_values_and_refuse_others(server: Server) -> None:
    t = facade(server)
    with pytest.raises(ValueError):
        t.endpoints.create(TENANT, url="https://x.example", signatures="v2")
    with pytest.raises(ValueError):
        t.endpoints.update(TENANT, EP, auth={"type": "magic", "token": "t"})
    with pytest.raises(TypeError):
        t.endpoints.update(TENANT, EP, auth="bearer t")
    with pytest.raises(ValueError):
        t.endpoints.attempts(TENANT, EP, outcome="lost")
    with pytest.raises(ValueError):
        t.endpoints.create(TENANT, url="https://x.example", payload_format="xml")
    server.answer = Answer(200, "application/json", FIXTURES["EndpointList"])
    count = len(server.received)
    t.endpoints.list(TENANT, state=tern_api.models.EndpointStateFilter.DISABLED)
    assert only(server, count).target.endswith("?state=disabled")


def test_the_answer_shows_settings_and_never_a_secret(server: Server) -> None:
    """The endpoint model carries every receiver setting; a secret header's value is None
    and the authentication names its secret only."""
    server.answer = Answer(200, "application/json", ENDPOINT)
    endpoint = facade(server).endpoints.get(TENANT, EP)
    assert [(h.name, h.value, h.secret) for h in endpoint.headers] == [
        ("x-tenant", "acme", False),
        ("x-api-key", None, True),
    ]
    assert endpoint.auth.type_ == tern_api.models.ReceiverAuthType.BEARER
    assert endpoint.auth.secret == "token"
    assert endpoint.signatures == tern_api.models.Signatures.BOTH
    assert endpoint.signing_keys[0].public_key == PUBLIC_KEY


def test_an_id_that_would_change_the_path_is_refused_before_anything_is_sent(
    server: Server,
) -> None:
    t = facade(server)
    count = len(server.received)
    for bad in ("", ".", ".."):
        with pytest.raises(ValueError):
            t.endpoints.get(TENANT, bad)
        with pytest.raises(ValueError):
            t.endpoints.list(bad)
        with pytest.raises(ValueError):
            t.events.resend(TENANT, EV, bad)
    assert len(server.received) == count


def test_raw_is_the_signed_generated_client_and_the_facade_closes_it(
    server: Server,
) -> None:
    from tern_api.api.endpoints import get_endpoint

    server.answer = Answer(200, "application/json", ENDPOINT)
    count = len(server.received)
    with facade(server) as t:
        response = get_endpoint.sync_detailed(TENANT, EP, client=t.raw)
        assert response.status_code == 200
        assert AUTHORIZATION.match(only(server, count).headers["authorization"])
        client = t.raw.get_httpx_client()
    assert client.is_closed


POSTS = [c for c in CASES if OPERATIONS[c.operation_id].method == "POST"]


def test_every_post_operation_has_a_keyed_case() -> None:
    assert len(POSTS) >= 10
    assert [c.facade for c in POSTS if c.keyed is None] == [], "POST methods without a keyed call"


@pytest.mark.parametrize("case", POSTS, ids=lambda c: c.facade)
def test_every_post_method_sends_an_idempotency_key_as_the_header_signed(
    server: Server, case: Case
) -> None:
    assert case.keyed is not None, f"{case.facade} takes idempotency_key="
    op = OPERATIONS[case.operation_id]
    assert op.schema is not None
    canned = FIXTURES[op.schema]
    server.answer = Answer(op.status, "application/json", canned)
    count = len(server.received)
    key = f"3f2b8c1e-{case.operation_id}"
    with facade(server) as t:
        result = case.keyed(t, key)
        got = only(server, count)
        assert got.target.partition("?")[0] == f"/prod{case.path}"
        assert got.headers["idempotency-key"] == key
        assert re.search(r"SignedHeaders=[^,]*\bidempotency-key\b", got.headers["authorization"])
        assert result == getattr(tern_api.models, op.schema).from_dict(canned)
        case.call(t)
        assert "idempotency-key" not in only(server, count + 1).headers


def test_an_error_answer_that_is_no_problem_document_still_raises_tern_api_error(
    server: Server,
) -> None:
    # API Gateway's own answer to a bad signature, and a proxy's HTML page.
    for answer, status, detail in [
        (Answer(403, "application/json", {"message": "Forbidden"}), 403, "Forbidden"),
        (Answer(502, "text/html", b"<html>Bad Gateway</html>"), 502, "<html>Bad Gateway</html>"),
        (Answer(404, "application/json", b""), 404, "Not Found"),
    ]:
        server.answer = answer
        with facade(server) as t:
            with pytest.raises(TernApiError) as raised:
                t.endpoints.get(TENANT, EP)
        assert raised.value.status == status
        assert raised.value.problem is not None
        assert raised.value.problem.type_ == "about:blank"
        assert raised.value.problem.detail == detail


def test_publish_sends_the_current_spans_trace_context_unless_one_is_given(
    server: Server,
) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    t = facade(server)
    server.answer = Answer(202, "application/json", FIXTURES["PublishedEvent"])
    span = NonRecordingSpan(
        SpanContext(
            0x4BF92F3577B34DA6A3CE929D0E0E4736,
            0x00F067AA0BA902B7,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    )
    given = "00-" + "1" * 32 + "-" + "2" * 16 + "-00"
    bodies = []
    for traced, kwargs in [(True, {}), (True, {"traceparent": given}), (False, {})]:
        count = len(server.received)
        if traced:
            with trace.use_span(span):
                t.events.publish(TENANT, type="t", payload={}, **kwargs)
        else:
            t.events.publish(TENANT, type="t", payload={}, **kwargs)
        bodies.append(json.loads(only(server, count).body))
    assert bodies == [
        {
            "type": "t",
            "payload": {},
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        },
        {"type": "t", "payload": {}, "traceparent": given},
        {"type": "t", "payload": {}},
    ]
