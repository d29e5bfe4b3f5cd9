"""The one-pass replay engines against the direct LRU + TTL simulation, on random traces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.replay.distances import NO_TTL, compute_distances
from kvtrace.replay.grid import hit_grid

from tests.replay_oracle import BS, any_trace, prefix_trace, simulate

CAPS = [0, 1, 2, 3, 5, 8, 13, 40]
TTLS_MS = [0, 1, 3, 10, None]


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
        peak = {tau: 0 for tau in ttls}
        for i in range(trace.n_requests):
            for tau in ttls:
                want = sum(1 for v in last.values() if t_us[i] - v <= tau)
                assert dist.live[tau][i] == want, (engine, i, tau)
            for b in trace.blocks(i):
                last[int(b)] = int(t_us[i])
            for tau in ttls:
                peak[tau] = max(peak[tau], sum(1 for v in last.values() if t_us[i] - v <= tau))
        assert dist.peak_after == peak, engine


@pytest.mark.parametrize("engine", ["numpy", "numba", "blocks"])
def test_an_empty_trace_replays_to_nothing(engine):
    tr = BlockTrace.from_lists([], [], [], [], BS)
    dist = compute_distances(tr, [NO_TTL], engine=engine)
    hb, ht = hit_grid(dist, tr.input_length, BS, np.array([1]), np.array([NO_TTL]))
    assert hb.sum() == 0 and ht.sum() == 0
