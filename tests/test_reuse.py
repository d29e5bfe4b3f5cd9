"""Reuse profile: reuse-time distributions, threads (idle, resumptions, compactions), the CLI."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from typer.testing import CliRunner

from kvtrace.analyze.access import NEVER, run_chunks
from kvtrace.analyze.chains import ChainParams, derive_chains
from kvtrace.analyze.reuse import ReuseParams, reuse_profile, thread_table
from kvtrace.cli import app
from tests.paths import CONVERSATION
from tests.block_trace_files import BAILIAN_LINES, write_lines
from tests.chain_frames import frame
from tests.ttl_oracle import block_traces


@settings(max_examples=80, deadline=None)
@given(block_traces())
def test_reuse_times_are_never_negative_and_cdfs_rise(trace):
    for c in run_chunks(trace, requests=3):
        runs, rt = c.runs, c.times
        assert (rt.age >= 0).all() and (rt.eff_age >= rt.age).all()
        # A first access has no reuse time; every other access has one.
        assert ((rt.age == NEVER) == (runs.prev < 0)).all()
    p = reuse_profile(trace)
    for key in ("reuse_time", "effective_reuse_time"):
        cdf = [c["share_tokens"] for c in p[key]["cdf"]]
        assert all(0 <= a <= b <= 1 + 1e-12 for a, b in zip(cdf, cdf[1:]))


def test_conversation_reuse_times_match_the_reference_replay():
    from kvtrace.analyze.load import read_block_trace

    p = reuse_profile(read_block_trace(CONVERSATION))
    rt = p["reuse_time"]
    # Reference (block-weighted): p50 114 s, p90 519 s, 78.5% within 5 min, 28% within 1 min.
    assert rt["within_blocks"]["5m"] == pytest.approx(0.785, abs=0.001)
    assert rt["within_blocks"]["1m"] == pytest.approx(0.28, abs=0.005)
    assert rt["quantiles_s"]["p50"] == pytest.approx(114, abs=1)
    assert rt["quantiles_s"]["p90"] == pytest.approx(519, abs=1)
    assert rt["ttl_for_share_s"]["0.9"] == rt["quantiles_s"]["p90"]
    assert p["threads"] is None  # Mooncake traces carry no sessions
    assert p["trace"]["unique_blocks"] + rt["reused_blocks"] == p["trace"]["blocks"]


def test_threads_idle_periods_resumptions_and_compactions():
    rows = [
        dict(t=0, read=0, write=1000),
        dict(t=10, read=1000, write=100),
        dict(t=1000, read=0, write=1200),  # idle 990 s, resumed
        dict(t=1010, read=1200, write=50, query_source="auxiliary", is_compact_request=True),
        dict(t=1020, read=0, write=300),  # after the compaction
        dict(t=5, read=0, write=2000, session_id="other"),
    ]
    tr = derive_chains(frame(*rows), ChainParams(block_size=100, head_tokens=0))
    tab = thread_table(tr, ReuseParams(idle_s=300))
    main = tab.filter(tab["name"] == "o/s/main").row(0, named=True)
    assert (main["requests"], main["idle_periods"], main["compactions"], main["chains"]) == (5, 1, 1, 2)
    assert main["idle_s"] == pytest.approx(990) and main["resumed_prompt_tokens"] == 1202
    summary = reuse_profile(tr, ReuseParams(idle_s=300))["threads"]
    assert (summary["threads"], summary["sessions"], summary["resumptions"]) == (2, 2, 1)
    assert reuse_profile(tr, ReuseParams(idle_s=3600))["threads"]["resumptions"] == 0


def test_bailian_chats_group_into_sessions(tmp_path):
    from kvtrace.analyze.load import read_block_trace

    p = reuse_profile(read_block_trace(write_lines(tmp_path / "b.jsonl", BAILIAN_LINES)))
    assert p["threads"]["threads"] == 2 and p["threads"]["requests_per_thread"]["max"] == 3


# -- CLI ---------------------------------------------------------------------------------------------


def test_cli_reuse_on_a_file_json(tmp_path):
    src = CONVERSATION
    r = CliRunner().invoke(
        app,
        [
            "reuse",
            str(src),
            "--ttl",
            "5m,none",
            "--bytes-per-token",
            "327680",
            "--format",
            "json",
            "--out",
            str(tmp_path / "r.json"),
        ],
    )
    assert r.exit_code == 0, r.output
    data = orjson.loads((tmp_path / "r.json").read_bytes())
    assert [e["ttl_s"] for e in data["ttl"]] == [300.0, None]
    assert data["ttl"][0]["hit_ratio_blocks"] == pytest.approx(0.2877, abs=0.0005)
    assert data["ttl"][0]["working_set"]["peak_bytes"] == data["ttl"][0]["working_set"]["peak_tokens"] * 327680
    assert data["spend"] is None and not data["derived"]


def test_cli_reuse_and_export_on_telemetry(tmp_path):
    from kvtrace.ingest.base import Parsed
    from kvtrace.ingest.pipeline import IngestSummary, _merge
    from kvtrace.store import Store
    from tests.builders import request_rows

    db = tmp_path / "kv.duckdb"
    with Store(db) as store, store.transaction():
        _merge(
            store,
            Parsed(
                requests=request_rows(
                    dict(request_key="a", ts=0, cache_write_5m_tokens=20_000, input_tokens=3, output_tokens=50),
                    dict(request_key="b", ts=2, cache_read_tokens=20_000, cache_write_5m_tokens=900, input_tokens=3),
                    dict(request_key="c", ts=40, cache_write_5m_tokens=21_500, input_tokens=3),
                )
            ),
            IngestSummary(),
        )
    r = CliRunner().invoke(app, ["reuse", "--db", str(db), "--ttl", "5m,1h"])
    assert r.exit_code == 0, r.output
    assert "TTL what-if" in r.output and "API spend what-if" in r.output
    r = CliRunner().invoke(app, ["reuse", "--db", str(db), "--format", "json"])
    data = orjson.loads(r.stdout)
    assert data["derived"] and data["spend"]["writes_that_would_be_reads"] == 20_900
    out = tmp_path / "fleet.jsonl"
    r = CliRunner().invoke(
        app, ["export", "--db", str(db), "--format", "mooncake", "--out", str(out), "--block-size", "128"]
    )
    assert r.exit_code == 0, r.output
    recs = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert [x["timestamp"] for x in recs] == [0, 120_000, 2_400_000]
    assert len(recs[0]["hash_ids"]) == -(-20_003 // 128)
    r = CliRunner().invoke(app, ["export", "--db", str(db), "--format", "parquet", "--out", str(out)])
    assert r.exit_code == 1 and "unknown export format" in r.output


def test_cli_reuse_errors(tmp_path):
    r = CliRunner().invoke(app, ["reuse", "--db", str(tmp_path / "none.duckdb")])
    assert r.exit_code == 1 and "no warehouse" in r.output
    r = CliRunner().invoke(app, ["reuse", str(tmp_path), "--ttl", "5 parsecs"])
    assert r.exit_code != 0
