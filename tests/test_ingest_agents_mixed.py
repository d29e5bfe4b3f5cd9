"""One warehouse, several agents: Claude Code, Codex, Gemini CLI and GenAI/OpenInference spans.

Every fixture data file is ingested (OTLP logs, metrics and traces, transcripts, rollouts,
chat logs), formats detected per file: each request must be stored once, whatever number of sources report it, and the
report must give each agent exactly the usage its stub (or the SDK script) served, in disjoint
buckets, with an overall mix that is their sum. Ingesting everything again changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.ingest import ingest
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.store import Store

FIX = Path(__file__).parent / "fixtures"
# every data file of the fixtures (not expected.json, nor Claude Code's agent-*.meta.json sidecars)
FILES = sorted(
    p
    for root in ("claude_code", "codex", "gemini", "genai")
    for pattern in ("**/*.jsonl", "**/*.jsonl.gz")
    for p in (FIX / root).glob(pattern)
)
MIX = ("input_uncached", "cache_read", "cache_write", "output")


def _load(p: Path) -> dict:
    return json.loads(p.read_text())


def expected_by_agent() -> dict[str, dict[str, int]]:
    """Requests and disjoint buckets per agent, from the fixtures' expected.json files."""
    out: dict[str, dict[str, int]] = {}

    def add(agent, requests, uncached, read, write, output):
        t = out.setdefault(agent, dict.fromkeys(("requests",) + MIX, 0))
        for k, v in zip(("requests",) + MIX, (requests, uncached, read, write, output)):
            t[k] += v

    for f in sorted((FIX / "claude_code").glob("*/expected.json")):
        t = _load(f)["totals"]["all"]
        add(
            "claude-code",
            t["requests"],
            t["input_tokens"],
            t["cache_read_tokens"],
            t["cache_creation_tokens"],
            t["output_tokens"],
        )
    for f in sorted((FIX / "codex").glob("*/expected.json")):
        t = _load(f)["totals"]
        add(
            "codex",
            t["requests"],
            t["input_tokens"],
            t["cache_read_tokens"],
            t["cache_write_tokens"],
            t["output_tokens"],
        )
    for f in sorted((FIX / "gemini").glob("*/expected.json")):
        t = _load(f)["totals"]["all"]
        add(
            "gemini-cli",
            t["requests"],
            t["input_tokens"],
            t["cache_read_tokens"],
            t["cache_write_tokens"],
            t["output_tokens"],
        )
    for agent, t in _load(FIX / "genai" / "spans" / "expected.json")["totals"].items():
        add(
            agent, t["requests"], t["input_tokens"], t["cache_read_tokens"], t["cache_write_tokens"], t["output_tokens"]
        )
    return out


def mix_of(entry: dict) -> dict[str, int]:
    m = entry["token_mix"]
    return {
        "requests": entry["requests"],
        "input_uncached": m["input_uncached"],
        "cache_read": m["cache_read"],
        "cache_write": m["cache_write_5m"] + m["cache_write_1h"] + m["cache_write_unknown"],
        "output": m["output"],
    }


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    db = tmp_path_factory.mktemp("mixed") / "kv.duckdb"
    with Store(db) as store:
        first = ingest(store, FILES)
        again = ingest(store, FILES, force=True)
        counts = store.query("SELECT agent, count(*) FROM requests GROUP BY agent ORDER BY agent")
        rep = build_report(store, ReportOptions(group_by=["agent"])).data
    return db, first, again, counts, rep


def test_every_source_format_was_read(mixed):
    _, first, _, _, _ = mixed
    assert set(first.formats) == {"otlp-json", "claude-transcript", "codex-rollout", "gemini-chat"}
    assert first.lines_rejected == 0, first.rejects


def test_each_agent_reports_exactly_what_was_served(mixed):
    _, _, _, _, rep = mixed
    want = expected_by_agent()
    got = {e["key"]: mix_of(e) for e in rep["groups"]["agent"]}
    assert got == want


def test_the_overall_mix_is_the_sum_of_the_agents(mixed):
    _, _, _, _, rep = mixed
    want = expected_by_agent()
    overall = mix_of({"requests": rep["requests"], "token_mix": rep["token_mix"]})
    assert overall == {k: sum(t[k] for t in want.values()) for k in ("requests",) + MIX}
    assert rep["token_mix"]["total"] == sum(overall[k] for k in MIX)


def test_ingesting_everything_again_changes_nothing(mixed):
    db, first, again, counts, _ = mixed
    assert first.requests_added == sum(n for _, n in counts)
    assert (again.requests_added, again.metric_points_added) == (0, 0)
    assert again.duplicates_skipped == first.requests_added + first.metric_points_added + first.duplicates_skipped
    with Store(db, read_only=True) as store:
        assert store.query("SELECT agent, count(*) FROM requests GROUP BY agent ORDER BY agent") == counts


def test_unknown_records_are_reported_per_kind(mixed):
    _, first, _, _, _ = mixed
    kinds = first.unknown_records
    for k in (
        "event:codex.api_request",
        "event:gemini_cli.api_request",
        "span:invoke_agent support",
        "span:Agent.run",
        "metric:gen_ai.client.token.usage",
    ):
        assert kinds.get(k, 0) > 0, k


def test_the_cli_reports_per_agent(mixed):
    db, _, _, _, rep = mixed
    r = CliRunner().invoke(app, ["report", "--db", str(db), "--group-by", "agent", "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert {e["key"]: mix_of(e) for e in data["groups"]["agent"]} == expected_by_agent()
    table = CliRunner().invoke(app, ["report", "--db", str(db), "--group-by", "agent"], env={"COLUMNS": "160"})
    assert table.exit_code == 0 and all(a in table.output for a in expected_by_agent())


def test_strict_makes_a_clip_fatal_and_unknown_records_never_are(store, tmp_path):
    from kvtrace.errors import BadTraceInput

    codex = FIX / "codex" / "exec_tool"
    s = ingest(store, [codex / "logs.jsonl", codex / "sessions"], strict=True)
    assert s.requests_added == len(_load(codex / "expected.json")["requests"]) and s.unknown_records
    span = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "name": "chat",
                                "startTimeUnixNano": "1790000000000000000",
                                "attributes": [
                                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "3"}},
                                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "9"}},
                                    {"key": "gen_ai.usage.cache_read.input_tokens", "value": {"intValue": "900"}},
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    f = tmp_path / "spans.jsonl"
    f.write_text(json.dumps(span) + "\n")
    with pytest.raises(BadTraceInput, match="gen_ai.usage.input_tokens"):
        ingest(store, [f], strict=True)
    s = ingest(store, [f])
    assert (s.requests_added, s.lines_rejected) == (1, 1) and "stored as 0" in s.rejects[0]


def test_the_cli_ingests_agent_folders(tmp_path):
    db = tmp_path / "kv.duckdb"
    r = CliRunner().invoke(
        app,
        [
            "ingest",
            "--db",
            str(db),
            "--json",
            str(FIX / "codex" / "resume" / "sessions"),
            str(FIX / "gemini" / "resume" / "tmp"),
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["requests_added"] == 4 and out["lines_rejected"] == 0
