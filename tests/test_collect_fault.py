"""Fault test: kill -9 the collector repeatedly under load from real OTel SDK exporter processes.

Load generators are separate processes using the SDK's ``LoggerProvider`` + batch processor and
its OTLP exporters (HTTP protobuf with gzip, and gRPC). A wrapper around the exporter writes a
batch's request ids to an "acked" file only after the exporter reported success (a 200 / OK),
and retries a failed batch, as a durable client would. The collector (``kvtrace collect`` as a
process, ingesting every second) is killed with SIGKILL several times and restarted on the same
ports. At the end: every acknowledged request is in the warehouse exactly once, with its tokens,
and nothing is there that was never sent.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtrace.store import Store
from tests.collect_support import TOKEN_KEYS, post

pytest.importorskip("kvtrace.ingest.otlp_json")

REPO = Path(__file__).resolve().parents[1]
GENERATORS = 4
RECORDS_PER_GENERATOR = 3000
KILLS = 5


def tokens_for(i: int) -> tuple[int, int, int, int]:
    return (i % 97, i % 13 + 1, i * 7 % 1000, i % 5)


# -- the load generator process --------------------------------------------------------------


def load_main() -> None:
    """``python -c 'from tests.test_collect_fault import load_main; load_main()' NAME PROTOCOL ENDPOINT N ACKED``."""
    name, protocol, endpoint, n, acked_path = sys.argv[1:6]
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        inner = OTLPLogExporter(endpoint=endpoint, insecure=True, timeout=5)
    else:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        inner = OTLPLogExporter(endpoint=endpoint, compression=Compression.Gzip, timeout=5)
    acked = open(acked_path, "a")

    class AckLogging(LogRecordExporter):
        def export(self, batch):
            deadline = time.monotonic() + 120
            while True:
                if inner.export(batch) == LogRecordExportResult.SUCCESS:
                    ids = [r.log_record.attributes["request_id"] for r in batch]
                    acked.write("\n".join(ids) + "\n")
                    acked.flush()
                    return LogRecordExportResult.SUCCESS
                if time.monotonic() > deadline:
                    return LogRecordExportResult.FAILURE
                time.sleep(0.2)

        def shutdown(self):
            inner.shutdown()

        def force_flush(self, timeout_millis=30000):
            return True

    provider = LoggerProvider()
    provider.add_log_record_processor(
        BatchLogRecordProcessor(
            AckLogging(), max_queue_size=100_000, max_export_batch_size=200, schedule_delay_millis=20
        )
    )
    logger = provider.get_logger("com.anthropic.claude_code.events", "2.1.0")
    rng = random.Random(name)
    for i in range(int(n)):
        attrs = {
            "event.name": "api_request",
            "session.id": f"sess-{name}",
            "model": "claude-test",
            "request_id": f"{name}-{i:06d}",
        }
        attrs.update(dict(zip(TOKEN_KEYS, tokens_for(i))))
        logger.emit(body="claude_code.api_request", attributes=attrs)
        if i % 50 == 0:
            time.sleep(rng.uniform(0.1, 0.4))  # sustained load (~20 s), spread over the kills
    provider.shutdown()
    acked.close()


# -- the test --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_collector(spool: Path, db: Path, http_port: int, grpc_port: int, log) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "kvtrace",
        "collect",
        "--spool",
        str(spool),
        "--db",
        str(db),
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--ingest-every",
        "1s",
        "--segment-age",
        "0.5s",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "the collector exited during start-up"
        try:
            if post(http_port, "/healthz", b"", method="GET")[0] == 200:
                return proc
        except OSError:
            pass
        assert time.monotonic() < deadline, "the collector did not start"
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_9_under_load_loses_nothing_acknowledged_and_duplicates_nothing(tmp_path):
    spool, db = tmp_path / "spool", tmp_path / "kv.duckdb"
    http_port, grpc_port = _free_port(), _free_port()
    log = open(tmp_path / "collector.log", "ab")
    proc = _start_collector(spool, db, http_port, grpc_port, log)
    gens = []
    for g in range(GENERATORS):
        protocol = "grpc" if g % 2 else "http"
        endpoint = f"127.0.0.1:{grpc_port}" if protocol == "grpc" else f"http://127.0.0.1:{http_port}/v1/logs"
        gens.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from tests.test_collect_fault import load_main; load_main()",
                    f"g{g}",
                    protocol,
                    endpoint,
                    str(RECORDS_PER_GENERATOR),
                    str(tmp_path / f"acked-g{g}.txt"),
                ],
                cwd=REPO,
                stderr=subprocess.DEVNULL,
            )
        )
    rng = random.Random(7)
    kills = 0
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(1.5, 3.0))
            if all(g.poll() is not None for g in gens):
                break
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
            proc = _start_collector(spool, db, http_port, grpc_port, log)
        for g in gens:
            assert g.wait(timeout=240) == 0
    finally:
        for g in gens:
            if g.poll() is None:
                g.kill()
        proc.send_signal(signal.SIGTERM)  # a clean stop: flush, convert and ingest the rest
        code = proc.wait(timeout=120)
        log.close()
    assert code == 0, (tmp_path / "collector.log").read_text()[-3000:]
    assert kills >= 3

    acked = set()
    for g in range(GENERATORS):
        acked |= set((tmp_path / f"acked-g{g}.txt").read_text().split())
    sent = {f"g{g}-{i:06d}" for g in range(GENERATORS) for i in range(RECORDS_PER_GENERATOR)}
    assert acked == sent  # every batch was eventually acknowledged (retried across the kills)
    with Store(db, read_only=True) as store:
        rows = store.query(
            "SELECT request_id, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_5m_tokens + cache_write_1h_tokens + cache_write_unknown_tokens FROM requests"
        )
    text = (tmp_path / "collector.log").read_text()
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), "duplicates in the warehouse"
    assert set(ids) == acked, (len(acked - set(ids)), len(set(ids) - acked))
    for rid, *tokens in rows:
        assert tuple(tokens) == tokens_for(int(rid.split("-")[1])), rid
    print(
        json.dumps(
            {
                "kills": kills,
                "acked": len(acked),
                "stored": len(ids),
                "restarts_that_recovered_a_segment": text.count("recovered"),
                "ingest_cycles_logged": text.count("ingested"),
            }
        )
    )


@pytest.mark.slow
def test_a_volume_that_fills_and_empties_under_load_loses_nothing_acknowledged(tmp_path, small_tmpfs):
    """The spool and the warehouse share a small tmpfs; it is filled to the last byte twice while
    exporters send (batches get 503 and are re-sent; conversions and ingests fail and are
    retried), then emptied: every acknowledged record ends up stored exactly once, untouched."""
    from tests.conftest import fill

    vol = small_tmpfs("48m")
    spool, db = vol / "spool", vol / "kv.duckdb"
    http_port, grpc_port = _free_port(), _free_port()
    log = open(tmp_path / "collector.log", "ab")
    proc = _start_collector(spool, db, http_port, grpc_port, log)
    names = ("f0", "f1")
    gens = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from tests.test_collect_fault import load_main; load_main()",
                name,
                "http",
                f"http://127.0.0.1:{http_port}/v1/logs",
                "1500",
                str(tmp_path / f"acked-{name}.txt"),
            ],
            cwd=REPO,
            stderr=subprocess.DEVNULL,
        )
        for name in names
    ]
    try:
        for _ in range(2):
            time.sleep(2.0)
            filler = fill(vol)  # full: nothing more fits, not even a WAL page
            time.sleep(4.0)
            os.unlink(filler)  # and space returns, with no manual step
        for g in gens:
            assert g.wait(timeout=180) == 0
    finally:
        for g in gens:
            if g.poll() is None:
                g.kill()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        log.close()
    text = (tmp_path / "collector.log").read_text()
    assert code == 0, text[-3000:]
    assert "No space left" in text, "the volume never filled under the collector"
    acked = set()
    for name in names:
        acked |= set((tmp_path / f"acked-{name}.txt").read_text().split())
    assert acked == {f"{n}-{i:06d}" for n in names for i in range(1500)}
    with Store(db, read_only=True) as store:
        rows = store.query(
            "SELECT request_id, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_5m_tokens + cache_write_1h_tokens + cache_write_unknown_tokens FROM requests"
        )
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), "duplicates in the warehouse"
    assert set(ids) == acked, (len(acked - set(ids)), len(set(ids) - acked))
    for rid, *tokens in rows:
        assert tuple(tokens) == tokens_for(int(rid.split("-")[1])), rid
    assert not list((spool / "failed").glob("seg-*")) if (spool / "failed").exists() else True
    print(
        json.dumps(
            {
                "acked": len(acked),
                "stored": len(ids),
                "no_space_lines": text.count("No space left"),
                "retries_logged": text.count("failed (attempt"),
            }
        )
    )
