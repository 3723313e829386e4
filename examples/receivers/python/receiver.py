#!/usr/bin/env python3
"""A Tern webhook receiver in Python, using the Standard Webhooks library.

    pip install -r requirements.txt          # standardwebhooks==1.0.1
    TERN_WEBHOOK_SECRET=whsec_... [TERN_PAYLOAD_FORMAT=raw|standard_webhooks] python3 receiver.py [PORT]

PORT defaults to $PORT, else 8000; the address to $HOST, else 127.0.0.1.
TERN_PAYLOAD_FORMAT is the endpoint's payload format in Tern (default raw).

For every POST it:
  1. reads the RAW body bytes (never a re-serialized JSON parse: key order, spacing and
     number spelling change the bytes and so the signature);
  2. verifies webhook-id / webhook-timestamp / webhook-signature with the secret
     (HMAC-SHA256, constant-time, 5 minute tolerance both ways, any v1 entry may match,
     so it keeps working while Tern signs with two secrets during a rotation);
     a bad signature, a stale or future timestamp, or missing headers -> 400;
  3. learns the event type: from the signed body's "type" for the standard_webhooks format
     (and the event data from its "data"), from the webhook-event-type header for raw
     payloads (that header is not signed; see shared/tern-receiver/README.md); a body that
     is not a standard_webhooks envelope when one is expected -> 400;
  4. deduplicates on webhook-id, which is the same on every retry and replay of an event:
     a duplicate -> 200 without processing it again;
  5. answers 200 at once and processes the event on a worker thread, so Tern's request
     never waits for your business logic.
"""

import json
import os
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

MAX_BODY_BYTES = 1024 * 1024
PAYLOAD_FORMATS = ("raw", "standard_webhooks")

# Event ids already accepted. In-memory, so it is lost on restart and grows without bound:
# in production use a durable store with a TTL instead (e.g. a database table with a unique
# key on the id, Redis SET NX with an expiry, DynamoDB with a conditional put and TTL), and
# keep ids for longer than Tern's retry window plus the time within which you might replay.
seen_ids: set[str] = set()
seen_lock = threading.Lock()
work: "queue.Queue[tuple[str, str | None, object]]" = queue.Queue()


def first_time(event_id: str) -> bool:
    """Records event_id; True if it had not been seen before (atomic check-and-set)."""
    with seen_lock:
        if event_id in seen_ids:
            return False
        seen_ids.add(event_id)
        return True


def process(event_id: str, event_type: str | None, data: object) -> None:
    """Your business logic. Runs on the worker thread, after the 200 has been sent.
    `data` is the application's payload, parsed."""
    print(f"processing {event_id} type={event_type}", flush=True)


def event_type_and_data(payload_format: str, verified: object, headers: dict[str, str]):
    """The event type and the application's payload, or None if the body is not what
    `payload_format` promises. `verified` is the parsed body verify() returned."""
    if payload_format == "standard_webhooks":
        # Signed: the type comes from the body, never from the (unsigned) header.
        if not (isinstance(verified, dict) and isinstance(verified.get("type"), str) and "data" in verified):
            return None
        return verified["type"], verified["data"]
    # Raw payload: the type is in the webhook-event-type header, which is not signed.
    return headers.get("webhook-event-type"), verified


def worker() -> None:
    while True:
        event_id, event_type, data = work.get()
        try:
            process(event_id, event_type, data)
        except Exception as e:  # keep the worker alive; log and alert in real code
            print(f"failed {event_id}: {e!r}", file=sys.stderr, flush=True)


class Handler(BaseHTTPRequestHandler):
    webhook: Webhook  # set in main()
    payload_format: str  # set in main()

    def reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        try:
            length = int(self.headers.get("content-length", ""))
        except ValueError:
            return self.reply(411, {"error": "content-length required"})
        if length < 0 or length > MAX_BODY_BYTES:
            return self.reply(413, {"error": "body too large"})
        body = self.rfile.read(length)  # the raw bytes, exactly as Tern signed them

        # Header names in any case; a repeated header keeps its last value.
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            verified = self.webhook.verify(body, headers)  # the body, parsed
        except (WebhookVerificationError, ValueError) as e:
            # ValueError: malformed signature entries, bad base64, non-UTF-8 or non-JSON
            # body (verify() also parses the JSON it returns).
            print(f"rejected: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return self.reply(400, {"error": "invalid signature"})

        event = event_type_and_data(self.payload_format, verified, headers)
        if event is None:
            # Signed by Tern but not the shape configured here: answer 400, so Tern retries
            # and then dead-letters it (replayable once the two settings agree).
            print(f"rejected: not a {self.payload_format} body", file=sys.stderr, flush=True)
            return self.reply(400, {"error": f"expected a {self.payload_format} body"})

        event_id = headers["webhook-id"]  # present: verify() checked it
        if not first_time(event_id):
            return self.reply(200, {"status": "duplicate", "id": event_id})
        work.put((event_id, *event))
        return self.reply(200, {"status": "accepted", "id": event_id})

    def log_message(self, format: str, *args) -> None:  # quieter than the default
        print(f"{self.address_string()} {format % args}", file=sys.stderr, flush=True)


def main() -> None:
    secret = os.environ.get("TERN_WEBHOOK_SECRET")
    if not secret:
        sys.exit("set TERN_WEBHOOK_SECRET to the endpoint's whsec_... secret")
    port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "8000"))
    host = os.environ.get("HOST", "127.0.0.1")
    payload_format = os.environ.get("TERN_PAYLOAD_FORMAT", "raw")
    if payload_format not in PAYLOAD_FORMATS:
        sys.exit(f"TERN_PAYLOAD_FORMAT must be one of {', '.join(PAYLOAD_FORMATS)}")
    Handler.webhook = Webhook(secret)
    Handler.payload_format = payload_format
    threading.Thread(target=worker, daemon=True).start()
    server = ThreadingHTTPServer((host, port), Handler)
    print(f"listening on http://{host}:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
