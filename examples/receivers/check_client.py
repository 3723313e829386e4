#!/usr/bin/env python3
"""Sends Tern-style signed requests to one running receiver example and checks its answers.

Used by check.sh; needs PyPI standardwebhooks (to sign, as Tern would) and the stdlib only.

    python3 check_client.py --name NAME --url http://127.0.0.1:PORT/ --secret whsec_... \
        --log RECEIVER_STDOUT_FILE [--format raw|standard_webhooks]

--format is the payload format the receiver was started with (TERN_PAYLOAD_FORMAT): the
bodies are shaped as Tern shapes them for an endpoint with that format (the raw payload, or
the Standard Webhooks envelope around it, byte for byte as tern_core::request::body builds
it), and every request carries the webhook-event-type header, as Tern sends it.

Prints one `PASS <name>: <case>` or `FAIL <name>: <case>: <detail>` line per case; exits 0
if all passed.
"""

import argparse
import base64
import http.client
import json
import os
import re
import socket
import sys
import time
import urllib.parse
from datetime import datetime, timedelta, timezone

from standardwebhooks import Webhook

# The application's payload: spacing, key order and non-ASCII text that a re-serialization
# would change, and no "type" of its own (a raw receiver learns the type from the header).
PAYLOAD = '{"invoice": "in_1",  "amount": {"b": 1, "a": 2}, "name": "é😀", "n": 1e2}'.encode()
EVENT_TYPE = "invoice.paid"
CREATED_AT = "2026-03-01T12:00:00.250Z"  # the event's creation time, milliseconds, UTC


def body_for(payload_format: str, payload: bytes = PAYLOAD, event_type: str = EVENT_TYPE) -> bytes:
    """The body Tern sends for an endpoint with this payload format."""
    if payload_format == "standard_webhooks":
        # Concatenated, not serialized: "data" holds the payload's bytes unchanged.
        head = f'{{"type":{json.dumps(event_type)},"timestamp":"{CREATED_AT}","data":'
        return head.encode() + payload + b"}"
    return payload


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


class Client:
    def __init__(self, name: str, url: str, secret: str, log: str, payload_format: str):
        self.name = name
        self.format = payload_format
        self.body = body_for(payload_format)
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path or "/"
        self.wh = Webhook(secret)
        self.log = log
        self.passed = 0
        self.failed = 0
        self.run = base64.b32encode(os.urandom(5)).decode().lower()

    def event_id(self, tag: str) -> str:
        return f"evt_{self.run}_{tag}"

    def wait_ready(self, seconds: float = 30) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def signed_headers(
        self, event_id, *, body=None, offset=0, webhook=None, casing=str.lower, extra_sigs=(), event_type=EVENT_TYPE
    ):
        body = self.body if body is None else body
        when = datetime.now(tz=timezone.utc) + timedelta(seconds=offset)
        sig = (webhook or self.wh).sign(event_id, when, body.decode())
        sigs = " ".join([*extra_sigs, sig])
        return {
            casing("content-type"): "application/json",
            casing("webhook-id"): event_id,
            casing("webhook-timestamp"): str(int(when.timestamp())),
            casing("webhook-signature"): sigs,
            casing("idempotency-key"): event_id,
            casing("webhook-event-type"): event_type,
        }

    def post(self, headers, body):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
            try:
                payload = json.loads(text)
            except ValueError:
                payload = {"raw": text}
            return resp.status, payload
        finally:
            conn.close()

    def check(self, case, headers, body, want_status, want_state=None):
        try:
            status, payload = self.post(headers, body)
        except OSError as e:
            return self.result(case, False, f"request failed: {e!r}")
        ok = status == want_status and (want_state is None or payload.get("status") == want_state)
        detail = f"got {status} {payload}, want {want_status}" + (f" status={want_state}" if want_state else "")
        return self.result(case, ok, detail)

    def result(self, case, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {self.name}: {case}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {self.name}: {case}: {detail}", flush=True)
        return ok

    def processed_types(self, event_id) -> list[str] | None:
        """The type= of each `processing <id> type=<type>` line for event_id, in order."""
        line_re = re.compile(rf"^processing {re.escape(event_id)} type=(\S+)")
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return [m.group(1) for m in map(line_re.match, f) if m]
        except OSError:
            return None

    def run_all(self) -> None:
        if not self.wait_ready():
            self.result("receiver started", False, f"nothing listening on {self.host}:{self.port}")
            return
        title = lambda s: "-".join(p.capitalize() for p in s.split("-"))  # noqa: E731
        body = self.body
        a = self.event_id("a")
        self.check("signed request -> 200", self.signed_headers(a, casing=title), body, 200, "accepted")
        # A retry: same id, fresh timestamp and signature.
        self.check("duplicate webhook-id -> 200 duplicate", self.signed_headers(a), body, 200, "duplicate")

        b = self.event_id("b")
        tampered = body.replace(b"in_1", b"in_2")
        self.check("tampered body -> 400", self.signed_headers(b), tampered, 400)
        self.check("tampered request did not mark the id as seen -> 200", self.signed_headers(b), body, 200, "accepted")

        c = self.event_id("c")
        self.check("wrong secret -> 400", self.signed_headers(c, webhook=Webhook(new_secret())), body, 400)
        self.check("timestamp 10 min old -> 400", self.signed_headers(c, offset=-600), body, 400)
        self.check("timestamp 10 min ahead -> 400", self.signed_headers(c, offset=600), body, 400)
        h = self.signed_headers(c)
        del h["webhook-signature"]
        self.check("missing webhook-signature -> 400", h, body, 400)
        h = self.signed_headers(c)
        h["webhook-id"] = self.event_id("other")
        self.check("webhook-id changed -> 400", h, body, 400)

        d = self.event_id("d")
        other = Webhook(new_secret()).sign(d, datetime.now(tz=timezone.utc), body.decode())
        self.check(
            "rotation: wrong + right v1 entries -> 200",
            self.signed_headers(d, extra_sigs=("v1a,AAAA", other)),
            body,
            200,
            "accepted",
        )

        # The type each accepted event is processed with: invoice.paid, from the header for
        # raw payloads and from the body for standard_webhooks.
        want = {a: [EVENT_TYPE], b: [EVENT_TYPE], c: [], d: [EVENT_TYPE]}
        if self.format == "standard_webhooks":
            # The header is not signed: a changed one must not change the type acted on.
            e = self.event_id("e")
            self.check(
                "standard_webhooks: type from the signed body, not a changed header -> 200",
                self.signed_headers(e, event_type="invoice.void"),
                body,
                200,
                "accepted",
            )
            want[e] = [EVENT_TYPE]
            # Signed by Tern, but a raw payload where an envelope is expected: refused,
            # not acknowledged and dropped.
            f = self.event_id("f")
            raw = body_for("raw")
            self.check("standard_webhooks: a raw body -> 400", self.signed_headers(f, body=raw), raw, 400)
            want[f] = []

        # Processed exactly once each, after the reply, with the right type.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            got = {i: self.processed_types(i) for i in want}
            if got == want:
                break
            time.sleep(0.1)
        self.result(
            f"each accepted event processed exactly once, type={EVENT_TYPE} ({self.format})",
            got == want,
            f"processing lines (types) {got}, want {want}",
        )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--format", choices=("raw", "standard_webhooks"), default="raw")
    args = p.parse_args()
    c = Client(args.name, args.url, args.secret, args.log, args.format)
    c.run_all()
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
