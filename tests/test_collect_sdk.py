"""Real OpenTelemetry Python SDK exporters -> kvtrace collect -> ingest: tokens come out exactly.

Protocols: OTLP/HTTP protobuf with gzip and OTLP/gRPC through the SDK's own exporters, and
OTLP/HTTP JSON as an SDK-encoded request rendered by ``json_format`` with hex ids (the SDK's JSON
exporter cannot be installed beside the protobuf ones, which pin a different common package).
"""

from __future__ import annotations

import random

import orjson
import pytest
import requests

from kvtrace.store import Store
from tests.collect_support import TOKEN_KEYS, random_tokens, running_collector

pytestmark = pytest.mark.slow  # end-to-end: real processes, servers or long runs (make test-all)

pytest.importorskip("kvtrace.ingest.otlp_json")  # the ingest side of the round trip


def _emit(exporter, batch: dict[str, tuple[int, int, int, int]], session: str) -> None:
    """Emit Claude Code-shaped api_request events through a LoggerProvider + batch processor."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(resource=Resource.create({"service.name": "claude-code"}))
    provider.add_log_record_processor(
        BatchLogRecordProcessor(exporter, max_export_batch_size=64, schedule_delay_millis=50)
    )
    logger = provider.get_logger("com.anthropic.claude_code.events", "2.1.0")
    for rid, tokens in batch.items():
        attrs = {
            "event.name": "api_request",
            "session.id": session,
            "model": "claude-test",
            "request_id": rid,
            "cost_usd": 0.01,
            "duration_ms": 100,
        }
        attrs.update(dict(zip(TOKEN_KEYS, tokens)))
        logger.emit(body="claude_code.api_request", attributes=attrs)
    provider.shutdown()  # flushes every batch


def _json_exporter(base_url: str):
    """A LogRecordExporter posting OTLP JSON (SDK encoder -> json_format -> hex ids) over HTTP."""
    import base64

    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    def hexify(node):
        if isinstance(node, dict):
            return {
                k: (base64.b64decode(v).hex() if k in ("traceId", "spanId") else hexify(v)) for k, v in node.items()
            }
        return [hexify(v) for v in node] if isinstance(node, list) else node

    class JsonExporter(LogRecordExporter):
        def export(self, batch):
            body = orjson.dumps(hexify(json_format.MessageToDict(encode_logs(batch), use_integers_for_enums=True)))
            r = requests.post(
                f"{base_url}/v1/logs", data=body, headers={"content-type": "application/json"}, timeout=10
            )
            return LogRecordExportResult.SUCCESS if r.status_code == 200 else LogRecordExportResult.FAILURE

        def shutdown(self):
            pass

        def force_flush(self, timeout_millis=30000):
            return True

    return JsonExporter()


def _exporter(protocol: str, collector):
    if protocol == "http/protobuf+gzip":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        return OTLPLogExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/logs", compression=Compression.Gzip)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        return OTLPLogExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True)
    return _json_exporter(f"http://127.0.0.1:{collector.http_port}")


@pytest.mark.parametrize("protocol", ["http/protobuf+gzip", "grpc", "http/json"])
def test_sdk_exporter_to_warehouse_exact_tokens(tmp_path, protocol):
    rng = random.Random(hash(protocol) & 0xFFFF)
    sent = {f"req_{protocol[:4]}_{i:04d}": random_tokens(rng) for i in range(300)}
    db = tmp_path / "kv.duckdb"
    with running_collector(tmp_path, db=db, ingest_every=0.5) as c:
        _emit(_exporter(protocol, c), sent, session=f"sess-{protocol}")
        assert c.metrics.get("kvtrace_collect_stored_records_total") == len(sent)
    with Store(db, read_only=True) as store:
        rows = store.query(
            "SELECT request_id, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_5m_tokens + cache_write_1h_tokens + cache_write_unknown_tokens, "
            "session_id, model FROM requests"
        )
    got = {r[0]: tuple(r[1:5]) for r in rows}
    assert got == sent
    assert {(r[5], r[6]) for r in rows} == {(f"sess-{protocol}", "claude-test")}


def test_sdk_metrics_over_grpc_and_http(tmp_path):
    """Claude Code's token.usage counter (delta) through both SDK metric exporters -> metric_points."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
    from opentelemetry.sdk.metrics import Counter, MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader

    db = tmp_path / "kv.duckdb"
    delta = {Counter: AggregationTemporality.DELTA}
    with running_collector(tmp_path, db=db, ingest_every=60) as c:
        exporters = {
            "grpc": GrpcMetrics(endpoint=f"127.0.0.1:{c.grpc_port}", insecure=True, preferred_temporality=delta),
            "http": HttpMetrics(endpoint=f"http://127.0.0.1:{c.http_port}/v1/metrics", preferred_temporality=delta),
        }
        for name, exp in exporters.items():
            reader = PeriodicExportingMetricReader(exp, export_interval_millis=60_000)
            provider = MeterProvider(metric_readers=[reader])
            counter = provider.get_meter("com.anthropic.claude_code").create_counter(
                "claude_code.token.usage", unit="tokens"
            )
            counter.add(100, {"type": "input", "session.id": f"s-{name}", "model": "claude-test"})
            counter.add(7, {"type": "output", "session.id": f"s-{name}", "model": "claude-test"})
            provider.shutdown()
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT session_id, token_type, sum(value) FROM metric_points GROUP BY ALL ORDER BY ALL")
    assert rows == [
        ("s-grpc", "input", 100.0),
        ("s-grpc", "output", 7.0),
        ("s-http", "input", 100.0),
        ("s-http", "output", 7.0),
    ]
