"""Times outside a plausible range: rejected at ingest with file:line:field; a warehouse that
already holds one (written before that check) still reports."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.errors import BadTraceInput
from kvtrace.ingest import ingest
from kvtrace.store import Store
from tests.transcript_records import assistant, main_file, write

runner = CliRunner()


@pytest.mark.parametrize(
    "when", ["10000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "2100-01-01T00:00:00Z", "1969-12-31T23:59:59Z"]
)
def test_a_transcript_time_outside_the_plausible_range_is_rejected(store, tmp_path, when):
    f = write(main_file(tmp_path), [assistant(msg="m_ok", req="r_ok"), assistant(msg="m_bad", req="r_bad", ts=when)])
    s = ingest(store, [f])
    assert store.scalar("SELECT list(message_id) FROM requests") == ["m_ok"]
    assert s.lines_rejected == 1 and s.rejects[0].startswith(f"{f}:2: field 'timestamp': time ")
    assert "outside 1970-01-01 .. 2100-01-01" in s.rejects[0]


def test_an_implausible_time_is_fatal_under_strict(store, tmp_path):
    f = write(main_file(tmp_path), [assistant(ts="10000-01-01T00:00:00Z")])
    with pytest.raises(BadTraceInput, match=r":1: field 'timestamp'"):
        ingest(store, [f], strict=True)
    assert store.scalar("SELECT count(*) FROM requests") == 0


def test_a_codex_rollout_time_outside_the_range_is_rejected(store, tmp_path):
    f = tmp_path / "rollout-2026-01-01T00-00-00-01a22730-f158-7ca1-810d-a30acb138904.jsonl"
    usage = {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 5, "reasoning_output_tokens": 0}
    lines = [
        {
            "timestamp": "2026-01-01T00:00:00Z",
            "type": "session_meta",
            "payload": {"id": "01a22730-f158-7ca1-810d-a30acb138904", "cwd": "/w"},
        },
        {
            "timestamp": "10000-01-01T00:00:00Z",
            "type": "event_msg",
            "payload": {"type": "token_count", "info": {"last_token_usage": usage, "total_token_usage": usage}},
        },
    ]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    s = ingest(store, [f])
    assert store.scalar("SELECT count(*) FROM requests") == 0
    assert s.lines_rejected == 1 and s.rejects[0].startswith(f"{f}:2: field 'timestamp': time 10000-"), s.rejects


def test_reports_hold_up_with_any_stored_time(tmp_path):
    db = tmp_path / "kv.duckdb"
    f = write(
        main_file(tmp_path), [assistant(msg="m1", req="r1"), assistant(msg="m2", req="r2", ts="2026-08-02T00:00:00Z")]
    )
    with Store(db) as s:
        ingest(s, [f])
        # as a warehouse written before the ingest check would hold them
        s.run("UPDATE requests SET ts = TIMESTAMP '10000-01-01 00:00:00' WHERE message_id = 'm2'")
    for args in (
        ["report"],
        ["report", "--format", "json"],
        ["report", "--since", "7d"],
        ["report", "--ttl", "5m,1h"],
        ["reuse"],
        ["report", "--format", "html", "--out", str(tmp_path / "r.html")],
    ):
        r = runner.invoke(app, [*args, "--db", str(db)])
        assert r.exit_code == 0, (args, r.output, r.exception)
    r = runner.invoke(app, ["report", "--format", "json", "--db", str(db)])
    window = json.loads(r.output)["window"]
    assert window["last_request"] == "10000-01-01T00:00:00Z" and window["first_request"].startswith("2026-08-01")
