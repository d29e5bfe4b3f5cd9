"""TTL what-if and working set: the acceptance numbers, an obviously correct oracle, invariants."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.load import read_block_trace
from kvtrace.analyze.ttl import hit_ratios, request_hits, ttl_section
from kvtrace.units import parse_ttls
from kvtrace.analyze.working_set import held_after_requests, working_set, working_sets
from tests.paths import CONVERSATION
from tests.ttl_oracle import TTLS, block_traces, oracle


@pytest.fixture(scope="module")
def conversation() -> BlockTrace:
    return read_block_trace(CONVERSATION)


def test_mooncake_conversation_acceptance(conversation):
    no_ttl, five_min = hit_ratios(conversation, [None, 300])
    assert no_ttl["hit_ratio_blocks"] == pytest.approx(0.3664, abs=0.0005)
    assert no_ttl["hit_ratio_tokens"] == pytest.approx(0.3736, abs=0.0005)
    assert five_min["hit_ratio_blocks"] == pytest.approx(0.2877, abs=0.0005)
    assert five_min["hit_ratio_tokens"] == pytest.approx(0.2934, abs=0.0005)


def test_mooncake_conversation_working_set(conversation):
    sec = ttl_section(conversation, [300.0], bytes_per_token=327_680)
    ws = sec[0]["working_set"]
    # The reference replay found about 11.0 M tokens held at the peak under a 300 s TTL.
    assert ws["peak_tokens"] == pytest.approx(11.0e6, rel=0.01)
    assert ws["mean_tokens"] <= ws["p99_tokens"] <= ws["peak_tokens"]
    assert ws["peak_bytes"] == ws["peak_tokens"] * 327_680
    assert set(sec[0]) == {"ttl_s", "hit_ratio_tokens", "hit_ratio_blocks", "working_set"}
    assert set(ws) == {"mean_tokens", "p99_tokens", "peak_tokens", "peak_bytes"}


def test_ttl_section_matches_oracle_on_real_trace(conversation):
    # A slice keeps the pure-Python oracle fast.
    sl = _slice(conversation, 1500)
    for tau in (30.0, 300.0, None):
        assert request_hits(sl, tau)[0].tolist() == oracle(sl, tau, held_too=False)[0].tolist()


def test_parse_ttls():
    assert parse_ttls("5m,1h,30s") == [30.0, 300.0, 3600.0]
    assert parse_ttls(["2d", "5m", "none"]) == [300.0, 172800.0, None]
    assert parse_ttls(None) == []


# -- oracle ---------------------------------------------------------------------------------------


def _slice(trace: BlockTrace, n: int) -> BlockTrace:
    end = trace.offsets[n]
    return BlockTrace(
        trace.ts[:n],
        trace.input_length[:n],
        trace.output_length[:n],
        trace.offsets[: n + 1],
        trace.hash_ids[:end],
        trace.block_size,
    )


@settings(max_examples=120, deadline=None)
@given(block_traces())
def test_what_if_equals_oracle(trace):
    for tau in TTLS:
        blocks, tokens = request_hits(trace, tau)
        ob, ot, oh = oracle(trace, tau)
        assert blocks.tolist() == ob.tolist()
        assert tokens.tolist() == ot.tolist()
        assert held_after_requests(trace, tau).tolist() == oh.tolist()
        h = hit_ratios(trace, [tau])[0]
        assert h["hit_blocks"] == int(ob.sum()) and h["hit_tokens"] == int(ot.sum())


@settings(max_examples=80, deadline=None)
@given(block_traces())
def test_hit_ratio_and_working_set_never_fall_as_ttl_grows(trace):
    hits = hit_ratios(trace, TTLS)
    for a, b in zip(hits, hits[1:]):
        assert b["hit_ratio_tokens"] >= a["hit_ratio_tokens"]
        assert b["hit_ratio_blocks"] >= a["hit_ratio_blocks"]
    sets = [working_set(trace, tau, series_points=0) for tau in TTLS]
    for a, b in zip(sets, sets[1:]):
        assert b["peak_tokens"] >= a["peak_tokens"]
        assert b["p99_tokens"] >= a["p99_tokens"]
        assert b["mean_tokens"] >= a["mean_tokens"] - 1e-6


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.sampled_from([1, 16, 512]), st.randoms(use_true_random=False))
def test_no_repeated_block_means_no_hit(n, B, rnd):
    next_id, lists = 0, []
    for _ in range(n):
        k = rnd.randint(0, 6)
        lists.append(list(range(next_id, next_id + k)))
        next_id += k
    ts = sorted(rnd.uniform(0, 100) for _ in range(n))
    trace = BlockTrace.from_lists(ts, [len(x) * B for x in lists], [1] * n, lists, B)
    for h in hit_ratios(trace, TTLS):
        assert h["hit_ratio_tokens"] == 0 and h["hit_ratio_blocks"] == 0


def test_working_set_series_covers_the_peak():
    trace = BlockTrace.from_lists([0, 10, 20, 400], [32, 32, 48, 16], [1] * 4, [[0, 1], [0, 1], [0, 1, 2], [9]], 16)
    ws = working_set(trace, 60, bytes_per_token=2.0, series_points=8)
    assert ws["peak_tokens"] == 3 * 16
    assert max(ws["series"]["max_tokens"]) == ws["peak_tokens"]
    assert ws["peak_bytes"] == 96.0
    # Held 0-20 s: 2 blocks, 20-80 s: 3 blocks, then nothing until the last request at 400 s.
    assert ws["mean_tokens"] == pytest.approx((20 * 2 + 60 * 3) * 16 / 400)


def _held_over_time_oracle(trace: BlockTrace, tau: float | None):
    """Held blocks on each interval between event times, by brute force at interval midpoints."""
    t = np.rint(trace.ts * 1e6).astype(np.int64)
    tau_us = None if tau is None else int(round(tau * 1e6))
    t0, t1 = int(t[0]), int(t[-1])
    cuts = set(t.tolist()) | ({int(x + tau_us) for x in t} if tau_us is not None else set())
    cuts = sorted(c for c in cuts if t0 <= c <= t1) + [t1]
    accesses: dict[int, list[int]] = {}
    for i in range(trace.n_requests):
        for b in set(trace.blocks(i).tolist()):
            accesses.setdefault(b, []).append(int(t[i]))
    values, lengths = [], []
    for a, b in zip(cuts, cuts[1:]):
        if b <= a:
            continue
        mid = (a + b) / 2
        held = sum(
            1 for times in accesses.values() if any(x <= mid and (tau_us is None or mid - x <= tau_us) for x in times)
        )
        values.append(held)
        lengths.append(b - a)
    return np.array(values), np.array(lengths, dtype=float), t1 - t0


@settings(max_examples=60, deadline=None)
@given(block_traces(max_requests=25))
def test_time_weighted_mean_and_p99_equal_brute_force(trace):
    if trace.n_requests < 2:
        return
    for tau in (0.0, 0.5, 5.0, 60.0, None):
        ws = working_set(trace, tau, series_points=0)
        values, lengths, span = _held_over_time_oracle(trace, tau)
        if span == 0:
            continue
        B = trace.block_size
        assert ws["mean_tokens"] == pytest.approx(float(np.dot(values, lengths)) / span * B)
        order = np.argsort(values, kind="stable")
        cw = np.cumsum(lengths[order])
        p99 = values[order][np.searchsorted(cw, 0.99 * cw[-1], side="left")]
        assert ws["p99_tokens"] == p99 * B


@settings(max_examples=60, deadline=None)
@given(block_traces(max_requests=30), st.sampled_from([0, 3, 240]))
def test_working_sets_do_not_depend_on_the_chunking(trace, points):
    # chunks of 1, 2 and 5 requests carry departures, the last event and the level across
    # boundaries; requests of one time stay in one chunk
    ttls = [0.0, 1.0, 30.0, None]
    whole = working_sets(trace, ttls, bytes_per_token=2.0, series_points=points)
    for requests in (1, 2, 5):
        assert working_sets(trace, ttls, bytes_per_token=2.0, series_points=points, requests=requests) == whole
