"""End to end against ``tern local`` (run by tests/tests/clients.rs, also by hand: see
clients/README.md). What a Python backend does with Tern:

1. runs its own webhook receiver on 127.0.0.1 (a stand-in for its customer's);
2. creates an endpoint for it through the Tern API (SigV4-signed), keeping the secret;
3. writes an order row (its own table) and the event in ONE TransactWriteItems;
4. sees the event delivered, verified by the independent ``standardwebhooks`` library;
5. reads the delivery back through the API (event, attempts, the endpoint's log), sends
   a test event, sets receiver settings (a secret header, a bearer token, Ed25519 ``v1a``
   signatures; clients/README.md) and sees a test send carry them, and publishes an
   event through the API (idempotent on its id);
6. checks an error answer (problem+json naming the field), tenant isolation (another
   tenant's endpoint id is a 404) and atomicity (a failed transaction publishes nothing).

Every call goes through the facade (``Tern``); ``tern.raw`` only to read a header.

Prints one JSON line with what it saw; exits 1 with the reason on any failure.
"""

from __future__ import annotations

import datetime
import http.server
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import base64

import boto3
from botocore.credentials import Credentials
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from tern_api.api.endpoints import create_endpoint
from tern_api.models import DeliveryState, NewEndpoint, Problem
from tern_client import OutboxWriter, Tern, TernApiError

T = TypeVar("T")


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set")
    return value


def eventually(what: str, seconds: float, probe: Callable[[], T | None]) -> T:
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.1)


def api_error(what: str, call: Callable[[], object]) -> TernApiError:
    """The ``TernApiError`` a call raises; raises if it succeeds."""
    try:
        call()
    except TernApiError as e:
        return e
    raise RuntimeError(f"{what} succeeded")


class Receiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        Receiver.received.append(
            {"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        )
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass

    @classmethod
    def first(cls, webhook_id: str) -> dict[str, Any] | None:
        """The first request received with this ``webhook-id``, if any."""
        return next(
            (r for r in cls.received if r["headers"].get("webhook-id") == webhook_id),
            None,
        )


def main() -> None:
    tenant, other_tenant = env("TERN_E2E_TENANT"), env("TERN_E2E_OTHER_TENANT")
    region = env("AWS_REGION")
    credentials = Credentials(env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))

    # 1. The receiver.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        # 2. The endpoint, through the API.
        tern = Tern(env("TERN_API_URL"), region, credentials)
        created = tern.endpoints.create(
            tenant,
            url=f"http://127.0.0.1:{port}/hooks/py",
            event_types=["order.paid"],
            description="python e2e",
        )
        endpoint_id = created.endpoint.id
        webhook = Webhook(created.secret)

        # 3. The order row and the event in one transaction.
        dynamodb = boto3.client(
            "dynamodb",
            region_name=region,
            endpoint_url=env("AWS_ENDPOINT_URL"),
            aws_access_key_id=credentials.access_key,
            aws_secret_access_key=credentials.secret_key,
        )
        orders = env("TERN_E2E_ORDERS_TABLE")
        dynamodb.create_table(
            TableName=orders,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "order_id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "order_id", "KeyType": "HASH"}],
        )
        dynamodb.get_waiter("table_exists").wait(
            TableName=orders, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
        writer = OutboxWriter(env("TERN_OUTBOX_TABLE"))
        order_id = f"o_py_{time.time_ns()}"
        # Text, not a dict: the bytes the receiver gets, including a number no float holds.
        payload = f'{{"order_id":"{order_id}","amount_cents":4200,"ledger_ref":12345678901234567890123,"note":"Zoë ✓"}}'
        event = writer.prepare(type="order.paid", tenant_id=tenant, payload=payload)
        order_put = {
            "Put": {
                "TableName": orders,
                "Item": {
                    "order_id": {"S": order_id},
                    "status": {"S": "paid"},
                    "event_id": {"S": event.id},
                },
                "ConditionExpression": "attribute_not_exists(order_id)",
            }
        }
        dynamodb.transact_write_items(TransactItems=[order_put, event.transact_item])

        # 4. Delivered and verified by an independent library.
        hit = eventually("the webhook", 30, lambda: Receiver.first(event.id))
        webhook.verify(hit["body"], hit["headers"])  # raises WebhookVerificationError
        if hit["body"] != payload.encode("utf-8"):
            raise RuntimeError(f"body differs from the payload: {hit['body']!r}")
        try:
            webhook.verify(hit["body"].replace(b"4200", b"4201"), hit["headers"])
            raise RuntimeError("the verifier accepted a changed body")
        except WebhookVerificationError:
            pass

        # 5. The delivery, read back through the API.
        def delivered() -> Any:
            got = tern.events.get(tenant, event.id)
            mine = [d for d in got.deliveries if d.endpoint_id == endpoint_id]
            return got if mine and mine[0].state == DeliveryState.DELIVERED else None

        got = eventually("the delivery state", 30, delivered)
        if got.type_ != "order.paid":
            raise RuntimeError(f"event type {got.type_}")

        def attempted() -> Any:
            found = tern.events.attempts(tenant, event.id)
            ok = any(
                a.endpoint_id == endpoint_id and a.outcome == "delivered"
                for a in found.attempts
            )
            return found if ok else None

        attempts = eventually("the attempt", 30, attempted)

        # The endpoint's delivery log over a time range, filtered by outcome: the query
        # (with the ':' and '+' of a timestamp) is signed too.
        since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10)

        def logged() -> Any:
            page = tern.endpoints.attempts(
                tenant, endpoint_id, since=since, outcome="delivered", limit=10
            )
            return page if any(a.event_id == event.id for a in page.items) else None

        log = eventually("the endpoint's delivery log", 30, logged)

        # The endpoint as the API shows it, in its tenant's list.
        shown = tern.endpoints.get(tenant, endpoint_id)
        if shown.url != f"http://127.0.0.1:{port}/hooks/py" or not shown.enabled:
            raise RuntimeError(f"the endpoint reads back as {shown.to_dict()}")
        listed = tern.endpoints.list(tenant, state="enabled")
        if not any(e.id == endpoint_id for e in listed.items):
            raise RuntimeError("the endpoint is not listed")
        # A test send: signed like any delivery, answered now. Under an idempotency key,
        # its retry (as after a timeout) returns the first result and POSTs nothing more.
        test_key = str(uuid.uuid4())
        test_send = tern.endpoints.test(tenant, endpoint_id, idempotency_key=test_key)
        if not test_send.delivered:
            raise RuntimeError(
                f"the test send was not delivered: {test_send.to_dict()}"
            )
        test_hit = eventually(
            "the test event", 30, lambda: Receiver.first(test_send.event_id)
        )
        webhook.verify(test_hit["body"], test_hit["headers"])
        posts = len(Receiver.received)
        retried = tern.endpoints.test(tenant, endpoint_id, idempotency_key=test_key)
        if retried != test_send or len(Receiver.received) != posts:
            raise RuntimeError(
                f"the retried test send ran again: {retried.to_dict()},"
                f" {len(Receiver.received) - posts} POSTs"
            )

        # 5b. Receiver settings (clients/README.md): a secret header and a bearer token,
        # then a PATCH that keeps the header's secret without sending it again; a test send
        # carries both, and its v1a signature verifies (PyPI cryptography) with the public
        # key the key rotation answered. The secret is never in an answer.
        api_key = f"key-py-{time.time_ns()}"
        with_auth = tern.endpoints.update(
            tenant,
            endpoint_id,
            headers=[{"name": "X-Api-Key", "value": api_key, "secret": True}],
            auth={"type": "bearer", "token": "tok-py-e2e"},
            signatures="both",
        )
        if (
            with_auth.headers[0].value is not None
            or with_auth.auth.type_.value != "bearer"
            or api_key in json.dumps(with_auth.to_dict())
        ):
            raise RuntimeError(f"the settings read back as {with_auth.to_dict()}")
        tern.endpoints.update(
            tenant,
            endpoint_id,
            headers=[
                {"name": "X-Api-Key", "secret": True},
                {"name": "X-Region", "value": "eu"},
            ],
        )
        public_key = tern.endpoints.rotate_signing_key(
            tenant, endpoint_id, overlap_hours=0
        ).public_key
        reach_send = tern.endpoints.test(tenant, endpoint_id)
        reach_hit = eventually(
            "the test event with the settings",
            30,
            lambda: Receiver.first(reach_send.event_id),
        )
        h = reach_hit["headers"]
        if (
            h.get("x-api-key") != api_key
            or h.get("x-region") != "eu"
            or h.get("authorization") != "Bearer tok-py-e2e"
        ):
            raise RuntimeError(f"the test send carried {h}")
        webhook.verify(reach_hit["body"], h)
        ed25519 = Ed25519PublicKey.from_public_bytes(
            base64.b64decode(public_key.removeprefix("whpk_"))
        )
        signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + reach_hit["body"]
        verified = False
        for entry in h.get("webhook-signature", "").split(" "):
            version, _, sig = entry.partition(",")
            if version == "v1a":
                try:
                    ed25519.verify(base64.b64decode(sig), signed)
                    verified = True
                except InvalidSignature:
                    pass
        if not verified:
            raise RuntimeError(f"no v1a signature verifies with {public_key}: {h}")
        # Back to the defaults for the rest.
        tern.endpoints.update(tenant, endpoint_id, headers=None, auth=None, signatures=None)

        # Publish through the API, the payload a dict: delivered as that JSON object, and
        # a repeat of the same id is the original (created False).
        api_payload = {
            "order_id": order_id,
            "source": "api",
            "amount_cents": 4200,
            "note": "Zoë ✓",
        }
        api_event_id = f"evt_py_api_{time.time_ns()}"
        published = tern.events.publish(
            tenant, type="order.paid", payload=api_payload, id=api_event_id
        )
        repeated = tern.events.publish(
            tenant, type="order.paid", payload=api_payload, id=api_event_id
        )
        if not (
            published.id == api_event_id
            and published.created
            and repeated.id == api_event_id
            and not repeated.created
        ):
            raise RuntimeError(
                f"publish {published.to_dict()}, then {repeated.to_dict()}"
            )
        api_hit = eventually(
            "the published event", 30, lambda: Receiver.first(api_event_id)
        )
        webhook.verify(api_hit["body"], api_hit["headers"])
        if json.loads(api_hit["body"]) != api_payload:
            raise RuntimeError(f"published body differs: {api_hit['body']!r}")

        # A batch in one request, with a key: that event again (200, nothing written) and a
        # new one without an id (202, an id made for it), delivered under that id.
        batch_payload = {"order_id": order_id, "source": "batch"}
        batch = tern.events.publish_batch(
            tenant,
            events=[
                {"type": "order.paid", "payload": api_payload, "id": api_event_id},
                {"type": "order.paid", "payload": batch_payload},
            ],
            idempotency_key=f"batch-{api_event_id}",
        )
        repeat_in_batch, made = batch.results
        if not (
            batch.failed == 0
            and repeat_in_batch.status == 200
            and made.status == 202
            and isinstance(made.id, str)
            and made.id.startswith("evt_")
        ):
            raise RuntimeError(f"publish_batch {batch.to_dict()}")
        made_id = made.id
        batch_hit = eventually(
            "the batch's new event", 30, lambda: Receiver.first(made_id)
        )
        webhook.verify(batch_hit["body"], batch_hit["headers"])
        if json.loads(batch_hit["body"]) != batch_payload:
            raise RuntimeError(f"batch body differs: {batch_hit['body']!r}")

        # 6a. An error answer: RFC 9457 problem naming the field, as a TernApiError; its
        # content type through the generated call on the raw client.
        bad = api_error(
            "an endpoint with a bad url",
            lambda: tern.endpoints.create(tenant, url="not a url"),
        )
        if not (
            bad.status == 400
            and bad.problem is not None
            and bad.problem.field == "url"
            and bad.problem.type_ == "urn:tern:problem:validation"
        ):
            raise RuntimeError(f"expected a 400 problem naming url, got {bad}")
        raw_bad = create_endpoint.sync_detailed(
            tenant, client=tern.raw, body=NewEndpoint(url="not a url")
        )
        content_type = raw_bad.headers.get("content-type", "")
        if not (
            raw_bad.status_code == 400
            and content_type.startswith("application/problem+json")
            and isinstance(raw_bad.parsed, Problem)
            and raw_bad.parsed.field == "url"
        ):
            raise RuntimeError(
                f"expected a 400 problem naming url, got {raw_bad.status_code} {content_type} {raw_bad.content!r}"
            )
        # 6b. Another tenant's view of this endpoint: 404, never 403.
        foreign = api_error(
            "another tenant's read",
            lambda: tern.endpoints.get(other_tenant, endpoint_id),
        )
        if foreign.status != 404:
            raise RuntimeError(f"another tenant got {foreign.status}")
        # 6c. Atomicity: the same order again fails its condition, so its event never exists.
        again = writer.prepare(
            type="order.paid", tenant_id=tenant, payload=f'{{"order_id":"{order_id}"}}'
        )
        try:
            dynamodb.transact_write_items(
                TransactItems=[order_put, again.transact_item]
            )
            raise RuntimeError("a duplicate order was written")
        except dynamodb.exceptions.TransactionCanceledException:
            pass
        ghost = api_error(
            "the canceled event's read", lambda: tern.events.get(tenant, again.id)
        )
        if ghost.status != 404:
            raise RuntimeError(f"the canceled event exists: {ghost.status}")
        row = dynamodb.get_item(TableName=orders, Key={"order_id": {"S": order_id}})
        if row.get("Item", {}).get("event_id", {}).get("S") != event.id:
            raise RuntimeError("the order row is not the first transaction's")

        print(
            json.dumps(
                {
                    "client": "python",
                    "endpoint_id": endpoint_id,
                    "event_id": event.id,
                    "order_id": order_id,
                    "orders_table": orders,
                    "verified": "standardwebhooks",
                    "attempts": len(attempts.attempts),
                    "endpoint_log": len(log.items),
                    "api_event_id": api_event_id,
                    "test_send_status": test_send.status,
                    "receiver_settings": "carried",
                    "v1a_public_key": public_key,
                    "problem_field": bad.problem.field,
                    "other_tenant_status": foreign.status,
                    "canceled_event_status": ghost.status,
                }
            )
        )
    finally:
        server.shutdown()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - the program's whole job is to report
        import traceback

        traceback.print_exc()
        print(f"e2e failed: {e}", file=sys.stderr)
        sys.exit(1)
