"""Prefix chains derived from telemetry, against the real block hashes of Claude Code conversations.

The committed kv-cache-tester conversations (``tests/fixtures/kv-cache-tester``) are turned into
the telemetry a hosted API with a 5 min cache reports (``tests/kv_cache_tester.py``); the chains
kvtrace derives from it must give the TTL what-if and working sets of the real hashes.
``bench/bench_chains.py`` measures the whole corpus (``docs/prefix-chains.md``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtrace.analyze.chains import ChainParams
from kvtrace.analyze.ttl import request_hits
from tests.kv_cache_tester import api_reads, compare, derived_trace, read_conversation, truth_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kv-cache-tester"


@pytest.fixture(scope="module")
def conversations() -> list[dict]:
    return [read_conversation(p) for p in sorted(FIXTURES.glob("trace_*.json.gz"))]


@pytest.fixture(scope="module")
def result(conversations) -> dict:
    return compare(conversations, ChainParams(head_tokens=0))


def test_the_telemetry_reads_what_a_5_minute_cache_of_the_hashes_holds(conversations):
    """The converter's check: its reads are the hashes' 5 min what-if, to under a block per request."""
    truth = truth_trace(conversations)
    reads = sum(sum(api_reads(c)) for c in conversations)
    hits = int(request_hits(truth, 300)[1].sum())
    assert 0 <= reads - hits <= 64 * truth.n_requests
    assert reads > 0.5 * truth.input_length.sum()


def test_the_fixtures_hold_the_three_patterns(conversations):
    """Deep rewrites and shrinks the reads reveal, and subagents sharing a thread id with others."""
    tr = derived_trace(conversations, ChainParams(head_tokens=0))
    read, cached = tr.meta["columns"]["read_tokens"], tr.meta["cached"]
    prompt, prev, shared = tr.input_length, tr.meta["chain_prev"], tr.meta["shared"]
    p = np.where(prev >= 0, prev, 0)
    linked = prev >= 0
    rewrite = linked & (shared < cached[p]) & (prompt >= cached[p]) & (read > 0)
    shrink = linked & (prompt < cached[p]) & (read > 0)
    threads = np.array([name.rsplit("/", 1)[-1] for name in tr.meta["thread_names"].to_pylist()])[tr.meta["thread"]]
    across = linked & (threads != threads[p])
    assert rewrite.sum() >= 2 and shrink.sum() >= 2 and across.sum() >= 2


@pytest.mark.parametrize("ttl", ["1m", "5m", "1h", "none"])
def test_derived_ttl_what_if_matches_the_hashes(result, ttl):
    r = result[ttl]
    assert abs(r["pp"]) <= 0.2, f"hit ratio {r['hit_derived']:.4%} vs {r['hit_truth']:.4%} from the hashes"


@pytest.mark.parametrize("ttl", ["1m", "5m", "1h", "none"])
def test_derived_working_sets_match_the_hashes(result, ttl):
    r = result[ttl]
    assert abs(r["peak_err"]) <= 0.03, f"peak {r['peak_derived']:,} vs {r['peak_truth']:,} tokens"
    assert abs(r["mean_err"]) <= 0.03, f"mean {r['mean_derived']:,.0f} vs {r['mean_truth']:,.0f} tokens"
