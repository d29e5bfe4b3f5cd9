"""Real Claude Code CLI output (tests/fixtures/claude_code/<scenario>/) ingested as OTLP JSON lines:
every request comes out with exactly the usage the stub API served, events and metrics never
count a request twice, and the metric alone (delta or cumulative) gives the same totals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from kvtrace.ingest.otlp_json import parse
from kvtrace.store import Store

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SCENARIOS = sorted(p.parent.name for p in FIXTURES.glob("*/expected.json") if (p.parent / "logs.jsonl").is_file())
if not SCENARIOS:
    pytest.skip("no real-client fixtures captured", allow_module_level=True)

BUCKETS = ("input", "read", "write", "output")


def expected(scenario: str) -> dict:
    return json.loads((FIXTURES / scenario / "expected.json").read_text())


def served(req: dict) -> dict:
    return {
        "input": req["input_tokens"],
        "read": req["cache_read_tokens"],
        "write": req["cache_creation_5m_tokens"] + req["cache_creation_1h_tokens"],
        "output": req["output_tokens"],
    }


def served_total(exp: dict) -> dict:
    return {k: sum(served(r)[k] for r in exp["requests"].values()) for k in BUCKETS}


def warehouse_total(store: Store) -> dict:
    row = store.query("""SELECT sum(input_tokens), sum(cache_read_tokens),
                                sum(cache_write_5m_tokens + cache_write_1h_tokens + cache_write_unknown_tokens),
                                sum(output_tokens) FROM request_usage""")[0]
    return dict(zip(BUCKETS, row))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_request_has_exactly_the_served_usage(scenario):
    exp = expected(scenario)
    p = parse(FIXTURES / scenario / "logs.jsonl")
    assert not p.rejects
    got = {r["request_id"]: r for r in p.requests.to_pylist()}
    assert set(got) == set(exp["requests"])  # errors and retried attempts are not requests
    for rid, want in exp["requests"].items():
        r = got[rid]
        split = r["cache_write_5m_tokens"] + r["cache_write_1h_tokens"] > 0
        assert {
            "input": r["input_tokens"],
            "read": r["cache_read_tokens"],
            "write": r["cache_write_5m_tokens"] + r["cache_write_1h_tokens"] + r["cache_write_unknown_tokens"],
            "output": r["output_tokens"],
        } == served(want), rid
        if split:  # a client that sends the TTL split must send the served one
            assert (r["cache_write_5m_tokens"], r["cache_write_1h_tokens"]) == (
                want["cache_creation_5m_tokens"],
                want["cache_creation_1h_tokens"],
            )
        assert r["session_id"] == want["session_id"] and r["model"] == want["model"]
        lane = want["lane"]
        assert r["query_source"] == {"main": "main", "subagent": "subagent"}.get(lane, "auxiliary"), (rid, lane)
        assert (r["thread_id"] == "main") == (lane != "subagent")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_events_metrics_and_spans_together_count_each_request_once(scenario, tmp_path):
    exp = expected(scenario)
    for f in (FIXTURES / scenario).glob("*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    with Store(memory=True) as store:
        s = ingest(store, [tmp_path])
        assert s.lines_rejected == 0
        assert warehouse_total(store) == served_total(exp)
        assert store.query("SELECT count(*) FROM requests")[0][0] == len(exp["requests"])
        again = ingest(store, [tmp_path], force=True)
        assert again.requests_added == again.metric_points_added == 0
        assert warehouse_total(store) == served_total(exp)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_metric_alone_gives_the_served_totals(scenario, tmp_path):
    exp = expected(scenario)
    shutil.copy(FIXTURES / scenario / "metrics.jsonl", tmp_path / "metrics.jsonl")
    with Store(memory=True) as store:
        ingest(store, [tmp_path / "metrics.jsonl"])
        temporalities = {t for (t,) in store.query("SELECT DISTINCT temporality FROM metric_points")}
        assert temporalities == {2 if exp["temporality"] == "cumulative" else 1}
        assert warehouse_total(store) == served_total(exp)


def test_llm_request_spans_add_time_to_first_token_without_a_second_row():
    scenario = next((s for s in SCENARIOS if (FIXTURES / s / "traces.jsonl").is_file()), None)
    if scenario is None:
        pytest.skip("no fixture with traces")
    from kvtrace.ingest.otlp_json import parse_lines

    data = (FIXTURES / scenario / "logs.jsonl").read_bytes() + (FIXTURES / scenario / "traces.jsonl").read_bytes()
    p = parse_lines(data, "mixed")
    rows = p.requests.to_pylist()
    assert len(rows) == len(expected(scenario)["requests"])
    assert all(r["source"] == "otlp-log" and r["ttft_ms"] is not None for r in rows)


@pytest.mark.parametrize("scenario", ["cumulative", "multi_turn"])
def test_a_file_that_repeats_its_own_lines_counts_each_request_and_point_once(scenario, tmp_path):
    # a Collector retry written into the same file: every key repeats inside one transaction
    exp = expected(scenario)
    for name in ("logs.jsonl", "metrics.jsonl"):
        text = (FIXTURES / scenario / name).read_text()
        (tmp_path / name).write_text(text + text)
    with Store(memory=True) as store:
        s = ingest(store, [tmp_path / "logs.jsonl"])
        assert (s.requests_added, s.duplicates_skipped) == (len(exp["requests"]), len(exp["requests"]))
        m = ingest(store, [tmp_path / "metrics.jsonl"])
        assert warehouse_total(store) == served_total(exp)
        again = ingest(store, [tmp_path / "metrics.jsonl"], force=True)
        assert again.metric_points_added == 0 and again.duplicates_skipped > 0
    with Store(memory=True) as once:
        single = ingest(once, [FIXTURES / scenario / "metrics.jsonl"]).metric_points_added
    assert m.metric_points_added == single > 0
