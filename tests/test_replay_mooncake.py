"""The replay on the real Mooncake FAST'25 traces: the acceptance figures and agreement with
the reuse analytics' TTL what-if and working set."""

from __future__ import annotations

import numpy as np
import pytest

from kvtrace.replay import replay
from kvtrace.replay.distances import compute_distances
from kvtrace.replay.tracefile import read_trace
from tests.paths import CONVERSATION, SYNTHETIC

CONV = str(CONVERSATION)
SYNTH = str(SYNTHETIC)
CAPS = [1_000_000, 3_000_000, 10_000_000, 50_000_000]


@pytest.fixture(scope="module")
def conv():
    return read_trace(CONV)


@pytest.fixture(scope="module")
def synth():
    return read_trace(SYNTH)


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_conversation_lru_block_hit_ratios(conv, engine):
    res = replay(conv, capacities=CAPS + [None], ttls=[300.0, None], engine=engine)
    got = [res.hit_ratio(c, None, "blocks") for c in CAPS]
    assert got == pytest.approx([0.0533, 0.1361, 0.2852, 0.3635], abs=0.0005)
    assert res.hit_ratio(None, None, "blocks") == pytest.approx(0.3664, abs=0.0005)
    assert res.hit_ratio(None, None, "tokens") == pytest.approx(0.3736, abs=0.0005)
    assert res.hit_ratio(None, 300.0, "blocks") == pytest.approx(0.2877, abs=0.0005)
    assert res.hit_ratio(None, 300.0, "tokens") == pytest.approx(0.2934, abs=0.0005)
    assert res.engine["kernel"] == engine


def test_synthetic_lru_block_hit_ratios(synth):
    res = replay(synth, capacities=CAPS, ttls=[None])
    got = [res.hit_ratio(c, None, "blocks") for c in CAPS]
    assert got == pytest.approx([0.142, 0.309, 0.567, 0.640], abs=0.002)


@pytest.mark.parametrize("ttl", [60.0, 300.0, 3600.0, None])
def test_unlimited_capacity_equals_the_reuse_ttl_whatif(conv, ttl):
    """The grid's unlimited-capacity row is the reuse analytics' TTL what-if, to the token."""
    from kvtrace.analyze.ttl import request_hits
    from kvtrace.analyze.working_set import held_after_requests

    res = replay(conv, capacities=[None], ttls=[ttl])
    blocks, tokens = request_hits(conv, ttl)
    assert res.grid[0]["hit_blocks"] == int(np.sum(blocks))
    assert res.grid[0]["hit_tokens"] == int(np.sum(tokens))
    assert res.working_set[0]["peak_tokens"] == int(held_after_requests(conv, ttl).max()) * conv.block_size


def test_engines_agree_run_by_run(conv):
    a = compute_distances(conv, [300_000_000], engine="numpy")
    b = compute_distances(conv, [300_000_000], engine="numba")
    for f in ("req", "first", "blocks", "d", "age", "unique"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for k in a.live:
        assert np.array_equal(a.live[k], b.live[k])


def test_hit_ratio_never_falls_with_capacity_or_ttl(conv):
    res = replay(conv)
    by_ttl: dict = {}
    for g in res.grid:
        by_ttl.setdefault(g["ttl_s"], []).append(g["hit_tokens"])
    rows = list(by_ttl.values())
    for row in rows:
        assert row == sorted(row)
    for lo, hi in zip(rows, rows[1:]):
        assert all(a <= b for a, b in zip(lo, hi))
    assert len(rows) == 8 and len(rows[0]) >= 64


def test_report_section_and_tier_fill_time(conv):
    from kvtrace.replay import dram_fill_time, tiers_report

    sec = tiers_report(conv, "seed-testbed", "MiniMax-M2.7:fp8", ttls=[300.0], capacities=[1_000_000, None])
    assert {g["ttl_s"] for g in sec["grid"]} == {300.0, None} and len(sec["grid"]) == 4
    assert [t["name"] for t in sec["tiers"]] == ["HBM", "DRAM", "NVMe"]
    assert sec["ttft"]["all"]["count"] == conv.n_requests
    dram = next(t for t in sec["tiers"] if t["name"] == "DRAM")
    fill = dram_fill_time(conv)
    assert fill["first_full_s"] == dram["first_full_s"] is not None
    # The DRAM band fills once the live blocks reach HBM + DRAM: never before that many distinct blocks.
    blocks_by_then = np.searchsorted(conv.ts - conv.ts[0], fill["first_full_s"], side="right")
    assert conv.offsets[blocks_by_then] * conv.block_size >= dram["depth_tokens"]
