"""``kvtrace collect`` as a command: refusal to bind unsafely, SIGTERM, spool-only mode + ingest, reports beside it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.store import Store
from tests.collect_support import api_request_json, logs_request_json, post, running_collector

REPO = Path(__file__).resolve().parents[1]
JSON = {"content-type": "application/json"}


def _body(prefix: str, n: int) -> bytes:
    return orjson.dumps(logs_request_json([api_request_json(f"{prefix}{i}", (i, 1, 2, 3)) for i in range(n)]))


def test_non_loopback_without_token_exits_1(tmp_path):
    res = CliRunner().invoke(
        app, ["collect", "--host", "0.0.0.0", "--spool", str(tmp_path / "s"), "--ingest-every", "off"]
    )
    assert res.exit_code == 1
    assert "without a token" in res.output and "--token" in res.output
    assert not (tmp_path / "s").exists()


def test_sigterm_stops_cleanly_after_flushing_and_ingesting(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    db = tmp_path / "kv.duckdb"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvtrace",
            "collect",
            "--spool",
            str(tmp_path / "spool"),
            "--db",
            str(db),
            "--http-port",
            "0",
            "--grpc-port",
            "-1",
            "--ingest-every",
            "1h",
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line).group(1))
        assert post(port, "/v1/logs", _body("req_term_", 25), JSON)[0] == 200
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "stopped cleanly" in rest and "ingested 1 segment" in rest
    with Store(db, read_only=True) as store:
        assert store.query("SELECT count(*) FROM requests WHERE request_id LIKE 'req_term_%'")[0][0] == 25


def test_spool_only_mode_then_kvtrace_ingest_spool(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    with running_collector(tmp_path, ingest_every=0) as c:
        for k in range(3):
            assert post(c.http_port, "/v1/logs", _body(f"req_sp{k}_", 10), JSON)[0] == 200
        c.spool.rotate()
        assert post(c.http_port, "/v1/logs", _body("req_sp_late_", 5), JSON)[0] == 200
        spool = c.config.spool
    db = tmp_path / "kv.duckdb"
    runner = CliRunner()
    first = runner.invoke(app, ["ingest", str(spool), "--db", str(db), "--json", "-q"])
    assert first.exit_code == 0, first.output
    assert orjson.loads(first.output)["requests_added"] == 35
    again = runner.invoke(app, ["ingest", str(spool), "--db", str(db), "--json", "-q"])
    assert orjson.loads(again.output)["requests_added"] == 0


def test_reports_read_the_warehouse_while_the_collector_runs(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    db = tmp_path / "kv.duckdb"
    with running_collector(tmp_path, db=db, ingest_every=0.3) as c:
        assert post(c.http_port, "/v1/logs", _body("req_rep_", 8), JSON)[0] == 200
        deadline = time.monotonic() + 60
        while c.metrics.get("kvtrace_collect_segments_ingested_total") < 1:
            assert time.monotonic() < deadline, "no ingest happened"
            time.sleep(0.1)
        time.sleep(0.2)  # let the worker close the warehouse
        n = None
        for _ in range(3):  # between ingests the warehouse is free for readers
            try:
                with Store(db, read_only=True) as store:
                    n = store.query("SELECT count(*) FROM requests")[0][0]
                break
            except Exception:  # noqa: BLE001 - an ingest cycle may hold it for a moment
                time.sleep(0.5)
        assert n == 8
        assert post(c.http_port, "/v1/logs", _body("req_rep2_", 4), JSON)[0] == 200
    with Store(db, read_only=True) as store:
        assert store.query("SELECT count(*) FROM requests")[0][0] == 12


def test_status_says_what_waits_and_what_is_set_aside(tmp_path):
    spool = tmp_path / "spool"
    (spool / "failed").mkdir(parents=True)
    (spool / "seg-2.jsonl").write_bytes(_body("w", 1) + b"\n")
    res = CliRunner().invoke(app, ["collect", "--status", "--spool", str(spool)])
    assert res.exit_code == 0, res.output
    state = orjson.loads(res.output)
    assert (state["ready"], state["set_aside"]) == (1, [])
    (spool / "failed" / "seg-1.jsonl").write_bytes(_body("f", 1) + b"\n")
    (spool / "failed" / "seg-1.error.txt").write_text("seg-1.jsonl:1: field 'input_tokens': not a token count\n")
    res = CliRunner().invoke(app, ["collect", "--status", "--spool", str(spool)])
    assert res.exit_code == 1
    assert orjson.loads(res.output)["set_aside"] == [
        {
            "path": str(spool / "failed" / "seg-1.jsonl"),
            "error": "seg-1.jsonl:1: field 'input_tokens': not a token count",
        }
    ]
