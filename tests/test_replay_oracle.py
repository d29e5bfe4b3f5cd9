"""The one-pass replay engines against the direct LRU + TTL simulation, on random traces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.replay.distances import NO_TTL, compute_distances
from kvtrace.replay.grid import hit_grid

from tests.replay_oracle import simulate

BS = 4
CAPS = [0, 1, 2, 3, 5, 8, 13, 40]
TTLS_MS = [0, 1, 3, 10, None]


def _trace(gaps_ms, hash_lists, extra):
    ts = np.cumsum(gaps_ms) / 1000.0
    lengths = [max(0, len(h) * BS - e) for h, e in zip(hash_lists, extra)]
    return BlockTrace.from_lists(ts, lengths, [1] * len(hash_lists), hash_lists, BS)


@st.composite
def any_trace(draw):
    """Arbitrary block lists: repeats within a request, shared ids at different depths."""
    n = draw(st.integers(1, 25))
    lists = [draw(st.lists(st.integers(0, 12), max_size=7)) for _ in range(n)]
    gaps = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(-3, 2 * BS), min_size=n, max_size=n))
    return _trace(gaps, lists, extra)


@st.composite
def prefix_trace(draw):
    """Prefix-closed traces (every block-hash format): each request extends a prefix of an
    earlier request (or starts fresh) with new ids."""
    n = draw(st.integers(1, 30))
    lists: list[list[int]] = []
    fresh = 0
    for _ in range(n):
        base: list[int] = []
        if lists and draw(st.booleans()):
            parent = lists[draw(st.integers(0, len(lists) - 1))]
            base = parent[:draw(st.integers(0, len(parent)))]
        new = draw(st.integers(0 if base else 1, 5))
        lists.append(base + list(range(fresh, fresh + new)))
        fresh += new
    gaps = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(-3, 2 * BS), min_size=n, max_size=n))
    return _trace(gaps, lists, extra)


def _check(trace, engine):
    ttls = [NO_TTL if t is None else t * 1000 for t in TTLS_MS]
    dist = compute_distances(trace, ttls, engine=engine)
    hb, ht = hit_grid(dist, trace.input_length, BS, np.array(CAPS), np.array(sorted(ttls)))
    for k, cap in enumerate(CAPS + [None]):
        for j, ttl in enumerate(sorted(ttls)):
            want = simulate(trace, cap, None if ttl == NO_TTL else ttl)
            assert (hb[k, j], ht[k, j]) == want, (engine, dist.kernel, cap, ttl)
    return dist


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(prefix_trace())
def test_run_engines_equal_the_simulation_on_prefix_closed_traces(trace):
    assert _check(trace, "numpy").kernel == "numpy"
    assert _check(trace, "numba").kernel == "numba"
    _check(trace, "blocks")


@SETTINGS
@given(any_trace())
def test_every_engine_equals_the_simulation_on_arbitrary_traces(trace):
    for engine in ("numpy", "numba", "blocks"):
        _check(trace, engine)


@SETTINGS
@given(prefix_trace())
def test_live_counts_equal_a_direct_count(trace):
    """Live blocks before each request under a TTL (the working set) by brute force."""
    ttls = [2000, NO_TTL]
    t_us = np.rint(trace.ts * 1e6).astype(np.int64)
    for engine in ("numpy", "numba", "blocks"):
        dist = compute_distances(trace, ttls, engine=engine)
        last: dict = {}
        for i in range(trace.n_requests):
            for tau in ttls:
                want = sum(1 for v in last.values() if t_us[i] - v <= tau)
                assert dist.live[tau][i] == want, (engine, i, tau)
            for b in trace.blocks(i):
                last[int(b)] = int(t_us[i])


@pytest.mark.parametrize("engine", ["numpy", "numba", "blocks"])
def test_an_empty_trace_replays_to_nothing(engine):
    tr = BlockTrace.from_lists([], [], [], [], BS)
    dist = compute_distances(tr, [NO_TTL], engine=engine)
    hb, ht = hit_grid(dist, tr.input_length, BS, np.array([1]), np.array([NO_TTL]))
    assert hb.sum() == 0 and ht.sum() == 0
