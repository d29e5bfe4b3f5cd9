"""Transcripts written by the real Claude Code CLI against the stub API (tests/fixtures/claude_code).

The stub chose every usage number, so the transcripts must give exactly those per request, and the
same main-thread and subagent totals as the CLI's own OTLP ``api_request`` events. A compaction
call (lane ``compact``) is not written to the transcript as an assistant record, so transcripts
cannot count it; the OTLP events do (query source ``auxiliary``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from kvtrace.ingest.claude_transcripts import parse

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SCENARIOS = sorted(
    p.parent.name for p in FIXTURES.glob("*/expected.json") if any((p.parent / "projects").rglob("*.jsonl"))
)
LANES = ("main", "subagent")  # what transcripts record
SUMS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "cache_write_unknown_tokens",
    "output_tokens",
)

pytestmark = pytest.mark.skipif(not SCENARIOS, reason="no real-client fixtures captured yet")


def expected(scenario: str) -> dict:
    return json.loads((FIXTURES / scenario / "expected.json").read_text())


def transcript_rows(scenario: str) -> dict[str, dict]:
    files = sorted((FIXTURES / scenario / "projects").rglob("*.jsonl"))
    p = parse(files)
    assert not p.rejects, [r.describe() for r in p.rejects]
    return {r["request_key"]: r for r in p.requests.to_pylist()}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_transcripts_give_the_stub_usage_per_request(scenario):
    want = {k: v for k, v in expected(scenario)["requests"].items() if v["lane"] in LANES}
    got = transcript_rows(scenario)
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        assert (
            g["input_tokens"],
            g["cache_read_tokens"],
            g["cache_write_5m_tokens"],
            g["cache_write_1h_tokens"],
            g["cache_write_unknown_tokens"],
            g["output_tokens"],
        ) == (
            w["input_tokens"],
            w["cache_read_tokens"],
            w["cache_creation_5m_tokens"],
            w["cache_creation_1h_tokens"],
            0,
            w["output_tokens"],
        ), key
        assert g["message_id"] == w["message_id"] and g["model"] == w["model"]
        assert g["query_source"] == w["lane"] and g["session_id"] == w["session_id"]
        assert (g["thread_id"] == "main") == (w["lane"] == "main")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ingesting_the_tree_twice_adds_nothing(store, scenario):
    root = FIXTURES / scenario / "projects"
    s1 = ingest(store, [root], format="claude-transcript")
    s2 = ingest(store, [root], format="claude-transcript", force=True)
    n = sum(1 for v in expected(scenario)["requests"].values() if v["lane"] in LANES)
    assert s1.requests_added == n and s2.requests_added == 0
    assert store.scalar("SELECT count(*) FROM requests") == n


def _totals(store, where: str) -> dict[str, dict]:
    cols = ", ".join(f"sum({c})::BIGINT" for c in SUMS)
    out = {}
    for qs, n, *sums in store.query(
        f"SELECT query_source, count(*), {cols} FROM requests WHERE {where} GROUP BY query_source"
    ):
        s = dict(zip(SUMS, sums))
        # OTLP events may not split the cache write by TTL: compare the write total too.
        out[qs] = {
            "requests": n,
            "input": s["input_tokens"],
            "read": s["cache_read_tokens"],
            "write": s["cache_write_5m_tokens"] + s["cache_write_1h_tokens"] + s["cache_write_unknown_tokens"],
            "output": s["output_tokens"],
        }
    return out


@pytest.mark.skipif(importlib.util.find_spec("kvtrace.ingest.otlp_json") is None, reason="no OTLP JSON parser yet")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_transcripts_and_otlp_events_agree_and_merge(store, scenario):
    root = FIXTURES / scenario
    ingest(store, [root / "logs.jsonl"], format="otlp-json")
    otlp = _totals(store, "source <> 'claude-transcript'")
    n_otlp, n_users = store.query("SELECT count(*), count(user_id) FROM requests")[0]
    ingest(store, [root / "projects"], format="claude-transcript")
    # The transcript copies merged into the OTLP rows (same request id): nothing counted twice,
    # and the merged rows keep the events' user.
    assert store.query("SELECT count(*), count(user_id) FROM requests")[0] == (n_otlp, n_users)

    from kvtrace.store import Store

    with Store(memory=True) as only_transcripts:
        ingest(only_transcripts, [root / "projects"], format="claude-transcript")
        tx = _totals(only_transcripts, "true")
    for lane in LANES:
        assert tx.get(lane) == otlp.get(lane), lane


def test_a_real_projects_tree_ingests_without_naming_the_format(store):
    """The CLI's agent-*.meta.json sidecars in a folder walk are skipped, not fatal."""
    scenario = next((s for s in SCENARIOS if any((FIXTURES / s / "projects").rglob("*.meta.json"))), None)
    if scenario is None:
        pytest.skip("no fixture with a subagent sidecar")
    s = ingest(store, [FIXTURES / scenario / "projects"])
    assert s.formats == {"claude-transcript": s.files - s.unknown_records["file:unrecognized"]}
    n = sum(1 for v in expected(scenario)["requests"].values() if v["lane"] in LANES)
    assert store.scalar("SELECT count(*) FROM requests") == n
