"""Helpers for the collector tests (no tests here): an in-process collector, payload builders (Claude
Code records in OTLP JSON and protobuf, and ``sdk_payloads``, encoded by the real OpenTelemetry SDK),
posts; ``as_protobuf`` (any OTLP JSON request as protobuf), ``receive`` (a body through the
receiver into a ready spool segment) and ``reasons`` (ingest's rejects without their place).
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import random
import re
import socket
from pathlib import Path

import orjson

from kvtrace.collect.config import CollectorConfig
from kvtrace.collect.server import Collector

TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


@contextlib.contextmanager
def running_collector(tmp_path: Path, **overrides):
    """A collector on free loopback ports, spool under ``tmp_path``; stopped (cleanly) on exit."""
    cfg = CollectorConfig(spool=tmp_path / "spool", http_port=0, grpc_port=0, ingest_every=0)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    c = Collector(cfg).start()
    try:
        yield c
    finally:
        c.stop()


class Connection(http.client.HTTPConnection):
    """A loopback HTTP connection with TCP_NODELAY: http.client sends headers and body in two
    writes, and Nagle + delayed ACK would add 40 ms to every request (real exporters set it too)."""

    def __init__(self, port: int, timeout: float = 30):
        super().__init__("127.0.0.1", port, timeout=timeout)

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def post(
    port: int,
    path: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    method: str = "POST",
    conn: http.client.HTTPConnection | None = None,
):
    """One request; returns ``(status, headers dict, body)``."""
    own = conn is None
    conn = conn or Connection(port)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        if own:
            conn.close()


def api_request_json(
    request_id: str,
    tokens: tuple[int, int, int, int],
    *,
    as_string: bool = False,
    session: str = "sess-1",
    model: str = "claude-test",
) -> dict:
    """One Claude Code ``api_request`` log record in OTLP JSON."""

    def num(v):
        return {"stringValue": str(v)} if as_string else {"intValue": str(v)}

    attrs = [
        {"key": "event.name", "value": {"stringValue": "api_request"}},
        {"key": "session.id", "value": {"stringValue": session}},
        {"key": "model", "value": {"stringValue": model}},
        {"key": "request_id", "value": {"stringValue": request_id}},
        {"key": "cost_usd", "value": {"doubleValue": 0.001}},
        {"key": "duration_ms", "value": {"intValue": "120"}},
    ]
    attrs += [{"key": k, "value": num(v)} for k, v in zip(TOKEN_KEYS, tokens)]
    return {
        "timeUnixNano": "1791447318137000000",
        "body": {"stringValue": "claude_code.api_request"},
        "attributes": attrs,
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
    }


def logs_request_json(records: list[dict]) -> dict:
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "claude-code"}}]},
                "scopeLogs": [
                    {"scope": {"name": "com.anthropic.claude_code.events", "version": "2.1.0"}, "logRecords": records}
                ],
            }
        ]
    }


def logs_request_pb(items: list[tuple[str, tuple[int, int, int, int]]], *, bad: set[str] = frozenset()):
    """A protobuf ``ExportLogsServiceRequest`` of api_request records; ids in ``bad`` get a non-numeric token."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="service.name").value.string_value = "claude-code"
    sl = rl.scope_logs.add()
    sl.scope.name = "com.anthropic.claude_code.events"
    for rid, tokens in items:
        lr = sl.log_records.add()
        lr.time_unix_nano = 1791447318137000000
        lr.body.string_value = "claude_code.api_request"
        lr.trace_id = bytes.fromhex("5b8efff798038103d269b633813fc60c")
        lr.span_id = bytes.fromhex("eee19b7ec3c1b174")
        lr.attributes.add(key="event.name").value.string_value = "api_request"
        lr.attributes.add(key="request_id").value.string_value = rid
        lr.attributes.add(key="model").value.string_value = "claude-test"
        for k, v in zip(TOKEN_KEYS, tokens):
            if rid in bad and k == "input_tokens":
                lr.attributes.add(key=k).value.string_value = "lots"
            else:
                lr.attributes.add(key=k).value.int_value = v
    return req


def gzip_bomb(size: int) -> bytes:
    """A small gzip body that inflates to ``size`` zero bytes."""
    return gzip.compress(b"\0" * size, compresslevel=9)


def random_tokens(rng: random.Random) -> tuple[int, int, int, int]:
    return (rng.randint(0, 5000), rng.randint(1, 900), rng.randint(0, 90000), rng.randint(0, 20000))


def sdk_payloads() -> dict[str, bytes]:
    """Logs, metrics (sum, histogram) and traces (events, links, array attributes) from the real SDK encoders."""
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    lexp = InMemoryLogRecordExporter()
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(lexp))
    tp = TracerProvider()
    sexp = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(sexp))
    tracer = tp.get_tracer("t")
    with tracer.start_as_current_span("outer") as span:
        span.set_attribute("list", [1, 2, 3])
        span.add_event("e", {"k": "v"})
        with tracer.start_as_current_span("inner"):
            lp.get_logger("com.anthropic.claude_code.events").emit(
                body="claude_code.api_request",
                severity_number=SeverityNumber.INFO,
                attributes={"input_tokens": 7, "cost_usd": 0.5, "flag": True, "tags": ["a", "b"]},
            )
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("m")
    meter.create_counter("claude_code.token.usage").add(11, {"type": "input"})
    meter.create_histogram("latency").record(2.5)
    return {
        "logs": encode_logs(lexp.get_finished_logs()).SerializeToString(),
        "metrics": encode_metrics(reader.get_metrics_data()).SerializeToString(),
        "traces": encode_spans(sexp.get_finished_spans()).SerializeToString(),
    }


def as_protobuf(signal: str, line: bytes | str) -> bytes:
    """An OTLP JSON export request as protobuf bytes (``json_format``, after turning the hex ids of
    OTLP JSON into the base64 that ``json_format`` expects)."""
    import base64

    from google.protobuf import json_format

    from kvtrace.collect import otlp

    def fix(node):
        if isinstance(node, dict):
            return {
                k: (
                    base64.b64encode(bytes.fromhex(v)).decode()
                    if k in ("traceId", "spanId", "parentSpanId")
                    else fix(v)
                )
                for k, v in node.items()
            }
        return [fix(v) for v in node] if isinstance(node, list) else node

    sig = otlp.SIGNALS[signal]
    return json_format.ParseDict(
        fix(orjson.loads(line)), sig.pb(sig.request)(), ignore_unknown_fields=True
    ).SerializeToString()


def receive(spool: Path, signal: str, media: str, body: bytes, name: str = "1") -> int:
    """``body`` as the collector receives it: decoded, appended as one frame of segment ``name``,
    sealed and converted to a ready OTLP JSON lines segment. Returns the records acknowledged."""
    from kvtrace.collect import otlp, segments

    batch = otlp.decode(otlp.SIGNALS[signal], media, body)
    spool.mkdir(parents=True, exist_ok=True)
    sealed = spool / f"seg-{name}.sealed"
    sealed.write_bytes(segments.encode_frame(batch.frame_kind, batch.payload) if batch.records else b"")
    segments.convert_sealed(sealed)
    return batch.records


def reasons(rejects: list[str]) -> list[str]:
    """Ingest's ``path:line: reason`` rejects as their reasons, sorted (the places differ)."""
    return sorted(re.sub(r"^.*?:\d+: ", "", r) for r in rejects)
