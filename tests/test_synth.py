"""kvtrace synth: the emitted OTLP and transcripts equal the generator's ledger; cache, TTL, chains."""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace.synth import MODELS, generate, preset, simulate
from kvtrace.synth.cache import account


# -- helpers ---------------------------------------------------------------------------------
def _lines(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        for line in fh:
            if line.strip():
                yield orjson.loads(line)


def _val(v: dict):
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    return v


def _attrs(items: list) -> dict:
    return {a["key"]: _val(a["value"]) for a in items}


def otlp_log_records(path: Path) -> list[tuple[int, dict, dict]]:
    out = []
    for req in _lines(path):
        for rl in req["resourceLogs"]:
            res = _attrs(rl["resource"]["attributes"])
            for sl in rl["scopeLogs"]:
                assert sl["scope"]["name"] == "com.anthropic.claude_code.events"
                for lr in sl["logRecords"]:
                    out.append((int(lr["timeUnixNano"]), _attrs(lr["attributes"]), res | {"_body": lr["body"]}))
    return out


def transcript_lines(root: Path) -> list[tuple[Path, dict]]:
    out = []
    for p in sorted(root.rglob("*.jsonl*")):
        for d in _lines(p):
            out.append((p, d))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small but busy run: several concurrent sessions, subagents, pauses, compactions."""
    out = tmp_path_factory.mktemp("synth")
    cfg = preset(
        "seed-study",
        seed=11,
        days=0.04,
        arrival_rate_per_min=1.5,
        users=8,
        orgs=2,
        context_cap_tokens=40_000,
        subagent_prob=0.08,
    )
    res = generate(cfg, out, formats=("otlp", "transcripts"))
    return res, res.ledger.to_dicts(), out


# -- ledger == outputs ---------------------------------------------------------------------
def test_ledger_equals_otlp_events(run):
    res, rows, out = run
    recs = otlp_log_records(out / "otlp" / "logs.jsonl")
    api = {a["request_id"]: (t, a, r) for t, a, r in recs if a["event.name"] == "api_request"}
    assert len(api) == len(rows) > 200
    for row in rows:
        t, a, r = api[row["request_id"]]
        assert t == row["end_ms"] * 1_000_000
        assert r["_body"] == {"stringValue": "claude_code.api_request"}
        assert r["service.name"] == "claude-code"
        assert (a["input_tokens"], a["cache_read_tokens"], a["cache_creation_tokens"], a["output_tokens"]) == (
            row["input_tokens"],
            row["cache_read_tokens"],
            row["cache_creation_tokens"],
            row["output_tokens"],
        )
        assert a["cost_usd"] == row["cost_usd"]
        assert (a["duration_ms"], a["ttft_ms"]) == (row["duration_ms"], row["ttft_ms"])
        assert (a["session.id"], a["user.id"], a["organization.id"], a["model"], a["query_source"], a["prompt.id"]) == (
            row["session_id"],
            row["user_id"],
            row["org_id"],
            row["model"],
            row["query_source"],
            row["prompt_id"],
        )
    # event.sequence: 1, 2, 3, ... per session in time order
    by_session = defaultdict(list)
    for t, a, _ in recs:
        by_session[a["session.id"]].append((t, a["event.sequence"]))
    for seqs in by_session.values():
        assert [s for _, s in seqs] == list(range(1, len(seqs) + 1))
        assert [t for t, _ in seqs] == sorted(t for t, _ in seqs)
    n_compact = sum(1 for _, a, _ in recs if a["event.name"] == "compaction")
    assert n_compact == sum(1 for r in rows if r["query_source"] == "compact") > 0


def test_ledger_equals_otlp_metrics(run):
    res, rows, out = run
    tokens, cost = defaultdict(float), defaultdict(float)
    for req in _lines(out / "otlp" / "metrics.jsonl"):
        for rm in req["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                assert sm["scope"]["name"] == "com.anthropic.claude_code"
                for m in sm["metrics"]:
                    assert m["sum"]["aggregationTemporality"] == 1 and m["sum"]["isMonotonic"] is True
                    for p in m["sum"]["dataPoints"]:
                        a = _attrs(p["attributes"])
                        assert int(p["timeUnixNano"]) - int(p["startTimeUnixNano"]) == 60_000_000_000
                        if m["name"] == "claude_code.token.usage":
                            tokens[(a["session.id"], a["type"])] += p["asDouble"]
                        else:
                            assert m["name"] == "claude_code.cost.usage" and m["unit"] == "USD"
                            cost[a["session.id"]] += p["asDouble"]
    want, want_cost = defaultdict(float), defaultdict(float)
    for r in rows:
        for typ, col in (
            ("input", "input_tokens"),
            ("output", "output_tokens"),
            ("cacheRead", "cache_read_tokens"),
            ("cacheCreation", "cache_creation_tokens"),
        ):
            if r[col]:
                want[(r["session_id"], typ)] += r[col]
        want_cost[r["session_id"]] += r["cost_usd"]
    assert tokens == want
    assert cost.keys() == want_cost.keys()
    assert all(abs(cost[k] - want_cost[k]) < 1e-6 for k in cost)


def test_ledger_equals_transcripts_after_dedup(run):
    res, rows, out = run
    groups: dict[str, list] = defaultdict(list)
    for path, d in transcript_lines(out / "claude"):
        if d["type"] == "assistant":
            groups[d["message"]["id"]].append((path, d))
    expected = [r for r in rows if r["in_transcript"]]
    assert len(groups) == len(expected) == len(rows) - sum(r["query_source"] == "compact" for r in rows)
    for r in expected:
        copies = groups[r["message_id"]]
        assert 1 <= len(copies) <= 5
        usage = [d["message"]["usage"] for _, d in copies]
        assert max(u["output_tokens"] for u in usage) == r["output_tokens"] == usage[-1]["output_tokens"]
        for u in usage:
            assert (
                u["input_tokens"],
                u["cache_read_input_tokens"],
                u["cache_creation_input_tokens"],
                u["cache_creation"]["ephemeral_5m_input_tokens"],
            ) == (r["input_tokens"], r["cache_read_tokens"], r["cache_creation_tokens"], r["cache_write_5m_tokens"])
        path, d = copies[-1]
        assert d["requestId"] == r["request_id"] and d["sessionId"] == r["session_id"]
        assert d["isSidechain"] is r["is_sidechain"]
        if r["is_sidechain"]:
            assert path.name.startswith(f"agent-{r['agent_id']}.jsonl")
            assert path.parent.name == "subagents" and path.parent.parent.name == r["session_id"]
        else:
            assert path.name.startswith(r["session_id"] + ".jsonl") and path.parent.name == r["project"]


# -- cache, TTL, chains ------------------------------------------------------------------------
def _oracle(rows: list[dict], ttl_ms: int, shared_heads: bool = True) -> None:
    """Re-derive every request's cache read from the rules, independently of the engine."""
    last: dict[str, dict] = {}
    head_touch: dict[tuple, int] = {}
    for r in sorted(rows, key=lambda r: r["seq"]):
        spec = MODELS[r["model"]]
        prev = last.get(r["thread_id"])
        key = (r["org_id"] if shared_heads else r["session_id"], r["model"], r["is_sidechain"])
        assert r["input_tokens"] + r["cache_read_tokens"] + r["cache_creation_tokens"] == r["prompt_tokens"]
        if r["prompt_tokens"] - r["input_tokens"] < spec.min_cacheable_tokens and r["cache_read_tokens"] == 0:
            assert r["cache_creation_tokens"] == 0
        elif r["chain_reason"] is None and r["start_ms"] - prev["start_ms"] <= ttl_ms:
            assert r["prompt_tokens"] == prev["prompt_tokens"] + prev["output_tokens"] + r["new_tokens"]
            assert r["cache_read_tokens"] == prev["cached_prefix_tokens"]
        elif key in head_touch and r["start_ms"] - head_touch[key] <= ttl_ms:
            assert r["cache_read_tokens"] == r["head_tokens"]
        else:
            assert r["cache_read_tokens"] == 0
        if r["cache_read_tokens"] + r["cache_creation_tokens"] >= r["head_tokens"] >= spec.min_cacheable_tokens:
            head_touch[key] = r["start_ms"]
        w5, w1 = r["cache_write_5m_tokens"], r["cache_write_1h_tokens"]
        assert (w5 if ttl_ms < 3_600_000 else w1) == r["cache_creation_tokens"] and min(w5, w1) == 0
        want = spec.cost_usd(r["input_tokens"], r["cache_read_tokens"], w5, w1, r["output_tokens"])
        assert r["cost_usd"] == want
        last[r["thread_id"]] = r


def test_cache_reads_follow_the_ttl_rules(run):
    res, rows, _ = run
    _oracle(rows, res.config.cache_ttl_s * 1000)
    sources = {r["read_source"] for r in rows}
    assert {"prefix", "head", "none"} <= sources


def test_gap_over_ttl_rewrites_the_prefix_except_a_warm_head():
    # Many concurrent sessions keep the head warm; everyone in the returning cohort pauses 12-18 min.
    cfg = preset(
        "seed-study",
        seed=3,
        days=0.05,
        arrival_rate_per_min=2.0,
        users=6,
        orgs=1,
        returning_fraction=1.0,
        subagent_prob=0.0,
        model_switch_prob=0.0,
    )
    rows = simulate(cfg).to_dicts()
    prev: dict[str, dict] = {}
    resumed = []
    for r in sorted(rows, key=lambda r: r["seq"]):
        p = prev.get(r["thread_id"])
        if p is not None and r["chain_reason"] is None and r["start_ms"] - p["start_ms"] > 300_000:
            resumed.append(r)
            # the whole prefix is written again, except the head when another session kept it warm
            assert r["cache_read_tokens"] in (0, r["head_tokens"])
            assert r["cache_creation_tokens"] == r["prompt_tokens"] - r["input_tokens"] - r["cache_read_tokens"]
            assert r["cache_creation_tokens"] > p["cached_prefix_tokens"] - r["head_tokens"]
        prev[r["thread_id"]] = r
    assert sum(r["read_source"] == "head" for r in resumed) >= 5
    # With a 1 h TTL the same pauses are served from the cache.
    rows_1h = {r["request_id"]: r for r in simulate(cfg.replace(cache_ttl_s=3600)).to_dicts()}
    assert all(rows_1h[r["request_id"]]["read_source"] == "prefix" for r in resumed)
    # With a head of its own per session, no other session keeps it warm: a pause rewrites it all.
    own = cfg.replace(shared_heads=False)
    rows_own = simulate(own).to_dicts()
    _oracle(rows_own, own.cache_ttl_s * 1000, shared_heads=False)
    by_id = {r["request_id"]: r for r in rows_own}
    assert all(by_id[r["request_id"]]["cache_read_tokens"] == 0 for r in resumed)


def test_account_unit_cases():
    # continuation within TTL reads the whole previous prefix
    assert account(30_000, 5, 28_000, 0, 16_000, 0, 299_000, 300_000, 1024) == (28_000, 1_995, 5, "prefix")
    # expired prefix, warm head (touched by another session)
    assert account(30_000, 5, 28_000, 0, 16_000, 250_000, 301_000, 300_000, 1024) == (16_000, 13_995, 5, "head")
    # everything cold
    assert account(30_000, 5, 28_000, 0, 16_000, 0, 301_000, 300_000, 1024) == (0, 29_995, 5, "none")
    # below the minimum cacheable prefix nothing is cached
    assert account(3_000, 5, 0, None, 2_000, 0, 1, 300_000, 4096) == (0, 0, 3_000, "uncacheable")


def test_compaction_shrinks_the_prompt(run):
    _, rows, _ = run
    by_thread = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["seq"]):
        by_thread[r["thread_id"]].append(r)
    seen = 0
    for reqs in by_thread.values():
        for prev, r in zip(reqs, reqs[1:]):
            if r["chain_reason"] == "compaction":
                seen += 1
                assert prev["query_source"] == "compact" and not prev["in_transcript"]
                assert r["prompt_tokens"] < prev["prompt_tokens"]
                # the new chain: head + summary (the compact request's output) + new content
                assert r["prompt_tokens"] == r["head_tokens"] + r["new_tokens"]
                assert r["new_tokens"] > prev["output_tokens"]
            elif r["chain_reason"] is None:
                assert r["prompt_tokens"] == prev["prompt_tokens"] + prev["output_tokens"] + r["new_tokens"]
                assert r["prompt_tokens"] >= prev["cached_prefix_tokens"]
            assert r["prompt_tokens"] <= 40_000 + 10_000
    assert seen > 0


def test_chains_start_where_the_ledger_says():
    cfg = preset("seed-study", seed=5, days=0.03, model_switch_prob=0.5)
    rows = simulate(cfg).to_dicts()
    first: set[str] = set()
    reasons = defaultdict(int)
    for r in sorted(rows, key=lambda r: r["seq"]):
        if r["thread_id"] not in first:
            first.add(r["thread_id"])
            assert r["chain_reason"] == "start"
        reasons[r["chain_reason"]] += 1
    assert reasons["model_change"] > 0
    for r in rows:
        if r["chain_reason"] == "model_change":
            assert r["read_source"] in ("head", "none") and r["prompt_tokens"] > r["head_tokens"] + r["new_tokens"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(0.2, 3.0),
    ttl=st.sampled_from([60, 300, 3600]),
    cap=st.integers(40_000, 80_000),
    file_p=st.floats(0, 1),
    agent_p=st.floats(0, 0.3),
    tail=st.integers(1, 40),
    jitter=st.integers(0, 150),
)
def test_invariants_hold_for_small_parameter_sets(seed, rate, ttl, cap, file_p, agent_p, tail, jitter):
    cfg = preset(
        "seed-study",
        seed=seed,
        days=0.01,
        arrival_rate_per_min=rate,
        cache_ttl_s=ttl,
        context_cap_tokens=cap,
        file_read_prob=file_p,
        subagent_prob=agent_p,
        tail_tokens=(1, tail),
        jitter_tokens=jitter,
        users=3,
        orgs=1,
    )
    ledger = simulate(cfg)
    rows = ledger.to_dicts()
    _oracle(rows, ttl * 1000)
    for r in rows:
        assert min(r["input_tokens"], r["cache_read_tokens"], r["cache_creation_tokens"], r["output_tokens"]) >= 0
        assert r["end_ms"] - r["start_ms"] == r["duration_ms"] >= r["ttft_ms"] > 0
    assert ledger.totals["requests"] == len(rows)
    assert ledger.totals["cache_read_tokens"] == sum(r["cache_read_tokens"] for r in rows)


def test_ledger_as_arrow_table(run):
    res, rows, _ = run
    t = res.ledger.to_arrow()
    assert t.num_rows == len(rows)
    assert t.column("cache_read_tokens").to_pylist() == [r["cache_read_tokens"] for r in rows]
    assert str(t.schema.field("ts").type) == "timestamp[ms, tz=UTC]"
