"""CLI plumbing: errors become one line and exit 1; ingest and report round trip."""

import json

from typer.testing import CliRunner

from kvtrace.cli import app

runner = CliRunner()


def test_report_without_warehouse_suggests_ingest(tmp_path):
    r = runner.invoke(app, ["report", "--db", str(tmp_path / "none.duckdb")])
    assert r.exit_code == 1
    assert "Error:" in r.output and "kvtrace ingest" in r.output


def test_bad_ttl_suggests_the_syntax(tmp_path, monkeypatch):
    from kvtrace.store import Store

    Store(tmp_path / "kv.duckdb").close()
    r = runner.invoke(app, ["report", "--db", str(tmp_path / "kv.duckdb"), "--ttl", "5 fortnights"])
    assert r.exit_code == 1 and "30s, 5m, 1h" in r.output
    db = ["--db", str(tmp_path / "kv.duckdb")]
    for cmd in (
        ["report", *db],
        ["reuse", *db],
        ["replay", *db],
        ["size", "--model", "MiniMax-M2.7", "--rate", "4200"],
    ):
        r = runner.invoke(app, [*cmd, "--ttl", "60"])
        assert r.exit_code == 1 and "'60' has no unit" in r.output and "60s, 60m or 60h" in r.output, (cmd, r.output)


def test_ingest_missing_file(tmp_path):
    r = runner.invoke(app, ["ingest", "--db", str(tmp_path / "kv.duckdb"), str(tmp_path / "nope.jsonl")])
    assert r.exit_code == 1 and "no such file" in r.output


def test_report_json_to_file(tmp_path):
    from kvtrace.store import Store

    Store(tmp_path / "kv.duckdb").close()
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["report", "--db", str(tmp_path / "kv.duckdb"), "--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert set(d) >= {"schema_version", "window", "requests", "sessions", "token_mix"}
    assert set(d["token_mix"]) >= {
        "cache_read",
        "cache_write_5m",
        "cache_write_1h",
        "cache_write_unknown",
        "output",
        "input_uncached",
        "total",
        "shares",
    }


def test_query_list_and_run(tmp_path):
    from kvtrace.store import Store

    Store(tmp_path / "kv.duckdb").close()
    r = runner.invoke(app, ["query", "--list"])
    assert r.exit_code == 0 and "usage_window" in r.output
    r = runner.invoke(app, ["query", "usage_bounds", "--db", str(tmp_path / "kv.duckdb"), "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == "first_ts,last_ts,requests,metric_points,block_requests"
    r = runner.invoke(app, ["query", "nope", "--db", str(tmp_path / "kv.duckdb")])
    assert r.exit_code == 1 and "known queries" in r.output


def test_report_can_ingest_first_in_one_process(tmp_path):
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "sample_traces" / "otlp"
    d = tmp_path / "otlp"
    shutil.copytree(src, d)
    db = str(tmp_path / "kv.duckdb")
    r = runner.invoke(
        app, ["report", "--db", db, "--ingest", str(d), "--format", "json", "--out", str(tmp_path / "r.json")]
    )
    assert r.exit_code == 0, r.output
    first = json.loads((tmp_path / "r.json").read_text())
    assert first["requests"] > 0
    r = runner.invoke(
        app, ["report", "--db", db, "--ingest", str(d), "--format", "json", "--out", str(tmp_path / "r2.json")]
    )
    assert json.loads((tmp_path / "r2.json").read_text())["token_mix"] == first["token_mix"]
