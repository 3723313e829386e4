"""One order's trace, from the Python program that writes it to a receiver that traces
(issue 30; run by tests/tests/tracing.rs, also by hand beside ``tern local``: see
docs/tracing.md). Two roles, each its own process and OpenTelemetry service:

``receiver``
    A webhook receiver on 127.0.0.1 that traces: each POST's span (kind server) is the
    child of the ``traceparent`` header Tern sends (the endpoint's ``send_traceparent``).
    It answers 500 to the first ``--fail`` requests, then 200. It prints
    ``{"port": N}`` once listening, and ``{"received": [...]}`` (each request's
    traceparent, status and span id) after its first 2xx, then exits.

``order``
    Writes an order row and its ``order.paid`` event in one ``TransactWriteItems``,
    inside a span: the Python client's ``OutboxWriter`` takes that span's context for the
    outbox item. Prints ``{"event_id", "trace_id", "span_id"}``.

Both export their spans over OTLP/HTTP (protobuf) to every ``--otlp`` traces URL
(local mode's collector, an OTLP backend), synchronously as each span ends, so a span is
exported before the receiver answers and before the program exits.

Environment for ``order``: ``AWS_ENDPOINT_URL`` (local mode's moto), ``AWS_REGION``,
credentials, ``TERN_OUTBOX_TABLE``, ``TERN_TENANT``.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading
import uuid

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


def provider(service: str, otlp: list[str]) -> TracerProvider:
    """A tracer provider of ``service`` exporting each span as it ends to every URL."""
    tracer_provider = TracerProvider(
        resource=Resource.create({"service.name": service})
    )
    for url in otlp:
        # SimpleSpanProcessor: exported on end, no batch thread to flush at exit.
        tracer_provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=10))
        )
    return tracer_provider


def out(line: dict) -> None:
    print(json.dumps(line), flush=True)


def receiver(otlp: list[str], fail: int) -> None:
    tracer = provider("order-receiver", otlp).get_tracer("traced_order.receiver")
    propagator = TraceContextTextMapPropagator()
    received: list[dict] = []
    done = threading.Event()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            parent = propagator.extract(
                {"traceparent": self.headers.get("traceparent", "")}
            )
            with lock:
                n = len(received) + 1
                status = 500 if n <= fail else 200
                with tracer.start_as_current_span(
                    "handle order.paid",
                    context=parent,
                    kind=trace.SpanKind.SERVER,
                    attributes={
                        "http.request.method": "POST",
                        "http.response.status_code": status,
                        "webhook.request": n,
                        "webhook.body_bytes": len(body),
                    },
                ) as span:
                    if status >= 500:
                        span.set_status(trace.StatusCode.ERROR)
                    span_id = format(span.get_span_context().span_id, "016x")
                received.append(
                    {
                        "traceparent": self.headers.get("traceparent"),
                        "status": status,
                        "span_id": span_id,
                    }
                )
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()
            if status < 300:
                done.set()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out({"port": server.server_address[1]})
    # Bounded: the test that runs this waits less; by hand, a minute is plenty.
    if not done.wait(timeout=120):
        out({"error": "no successful delivery within 120 s", "received": received})
        sys.exit(1)
    server.shutdown()
    out({"received": received})


def order(otlp: list[str]) -> None:
    import boto3
    from tern_client import OutboxWriter

    tracer_provider = provider("shop", otlp)
    tracer = tracer_provider.get_tracer("traced_order.shop")
    table = os.environ["TERN_OUTBOX_TABLE"]
    tenant = os.environ["TERN_TENANT"]
    dynamodb = boto3.client("dynamodb")
    order_id = f"o_{uuid.uuid4().hex[:12]}"
    with tracer.start_as_current_span(
        "place order", kind=trace.SpanKind.SERVER
    ) as span:
        span.set_attribute("shop.order_id", order_id)
        # No traceparent argument: the builder takes the current span's context.
        event = OutboxWriter(table).prepare(
            type="order.paid",
            tenant_id=tenant,
            payload=json.dumps({"order_id": order_id, "amount": 4200}),
        )
        order_put = {
            "Put": {
                "TableName": table,
                "Item": {
                    "event_id": {"S": f"order#{order_id}"},
                    "kind": {"S": "order"},
                },
            }
        }
        dynamodb.transact_write_items(TransactItems=[order_put, event.transact_item])
        context = span.get_span_context()
    tracer_provider.shutdown()
    out(
        {
            "event_id": event.id,
            "traceparent": event.traceparent,
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["receiver", "order"])
    parser.add_argument(
        "--otlp",
        action="append",
        default=[],
        help="an OTLP/HTTP traces URL (http://127.0.0.1:4318/v1/traces); repeatable",
    )
    parser.add_argument(
        "--fail", type=int, default=2, help="receiver: 500s before the first 200"
    )
    args = parser.parse_args()
    otlp = args.otlp or ["http://127.0.0.1:4318/v1/traces"]
    if args.role == "receiver":
        receiver(otlp, args.fail)
    else:
        order(otlp)


if __name__ == "__main__":
    main()
