#!/usr/bin/env python3
"""Sends Tern-style signed requests to one running receiver example and checks its answers.

Used by check.sh; needs PyPI standardwebhooks (to sign, as Tern would) and the stdlib only.

    python3 check_client.py --name NAME --url http://127.0.0.1:PORT/ --secret whsec_... \
        --log RECEIVER_STDOUT_FILE

Prints one `PASS <name>: <case>` or `FAIL <name>: <case>: <detail>` line per case; exits 0
if all passed.
"""

import argparse
import base64
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse
from datetime import datetime, timedelta, timezone

from standardwebhooks import Webhook

# Raw bytes with spacing, key order and non-ASCII text that a re-serialization would change.
BODY = '{"type": "invoice.paid",  "data": {"b": 1, "a": 2, "name": "é😀", "n": 1e2}}'.encode()


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


class Client:
    def __init__(self, name: str, url: str, secret: str, log: str):
        self.name = name
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

    def signed_headers(self, event_id, *, body=BODY, offset=0, webhook=None, casing=str.lower, extra_sigs=()):
        when = datetime.now(tz=timezone.utc) + timedelta(seconds=offset)
        sig = (webhook or self.wh).sign(event_id, when, body.decode())
        sigs = " ".join([*extra_sigs, sig])
        return {
            casing("content-type"): "application/json",
            casing("webhook-id"): event_id,
            casing("webhook-timestamp"): str(int(when.timestamp())),
            casing("webhook-signature"): sigs,
            casing("idempotency-key"): event_id,
        }

    def post(self, headers, body=BODY):
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

    def processed_count(self, event_id) -> int:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return sum(1 for line in f if line.startswith(f"processing {event_id} "))
        except OSError:
            return -1

    def run_all(self) -> None:
        if not self.wait_ready():
            self.result("receiver started", False, f"nothing listening on {self.host}:{self.port}")
            return
        title = lambda s: "-".join(p.capitalize() for p in s.split("-"))  # noqa: E731
        a = self.event_id("a")
        self.check("signed request -> 200", self.signed_headers(a, casing=title), BODY, 200, "accepted")
        # A retry: same id, fresh timestamp and signature.
        self.check("duplicate webhook-id -> 200 duplicate", self.signed_headers(a), BODY, 200, "duplicate")

        b = self.event_id("b")
        tampered = BODY.replace(b"invoice.paid", b"invoice.void")
        self.check("tampered body -> 400", self.signed_headers(b), tampered, 400)
        self.check("tampered request did not mark the id as seen -> 200", self.signed_headers(b), BODY, 200, "accepted")

        c = self.event_id("c")
        self.check("wrong secret -> 400", self.signed_headers(c, webhook=Webhook(new_secret())), BODY, 400)
        self.check("timestamp 10 min old -> 400", self.signed_headers(c, offset=-600), BODY, 400)
        self.check("timestamp 10 min ahead -> 400", self.signed_headers(c, offset=600), BODY, 400)
        h = self.signed_headers(c)
        del h["webhook-signature"]
        self.check("missing webhook-signature -> 400", h, BODY, 400)
        h = self.signed_headers(c)
        h["webhook-id"] = self.event_id("other")
        self.check("webhook-id changed -> 400", h, BODY, 400)

        d = self.event_id("d")
        other = Webhook(new_secret()).sign(d, datetime.now(tz=timezone.utc), BODY.decode())
        self.check(
            "rotation: wrong + right v1 entries -> 200",
            self.signed_headers(d, extra_sigs=("v1a,AAAA", other)),
            BODY,
            200,
            "accepted",
        )

        # Processed exactly once each, after the reply.
        deadline = time.monotonic() + 5
        want = {a: 1, b: 1, c: 0, d: 1}
        while time.monotonic() < deadline:
            got = {i: self.processed_count(i) for i in want}
            if got == want:
                break
            time.sleep(0.1)
        self.result("each accepted event processed exactly once", got == want, f"processing lines {got}, want {want}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--log", required=True)
    args = p.parse_args()
    c = Client(args.name, args.url, args.secret, args.log)
    c.run_all()
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
