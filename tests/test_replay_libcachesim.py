"""Cross-check against libCacheSim's LRU in plain object mode (one object per request, no TTL).

libcachesim is GPL-3.0: a test-only extra (``pip install libcachesim``), never a runtime
dependency; the test is skipped where it is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.replay.distances import NO_TTL, compute_distances
from kvtrace.replay.grid import hit_grid
from kvtrace.replay.tracefile import read_trace
from tests.paths import CONVERSATION

lcs = pytest.importorskip("libcachesim")

CONV = str(CONVERSATION)


def _lcs_hits(objects: np.ndarray, capacity: int) -> int:
    cache = lcs.LRU(cache_size=capacity)
    req = lcs.Request()
    req.obj_size = 1
    hits = 0
    for k, x in enumerate(objects.tolist()):
        req.obj_id = x
        req.clock_time = k
        hits += bool(cache.get(req))
    return hits


def _object_trace(objects: np.ndarray) -> BlockTrace:
    n = len(objects)
    return BlockTrace(np.arange(n, dtype=float), np.ones(n), np.zeros(n), np.arange(n + 1), objects, 1)


def _conv_accesses(limit: int) -> np.ndarray:
    """The conversation trace's block accesses in the order a replay touches them (tail first)."""
    tr = read_trace(CONV)
    out = np.concatenate([tr.blocks(i)[::-1] for i in range(tr.n_requests)])
    return out[:limit]


@pytest.mark.parametrize("source", ["mooncake", "zipf"])
@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_object_mode_hit_counts_equal_libcachesim_lru(source, engine):
    if source == "mooncake":
        objects = _conv_accesses(60_000)
    else:
        objects = np.random.default_rng(4).zipf(1.2, 60_000) % 5000
    caps = [1, 10, 100, 1000, 4000, 20_000]
    dist = compute_distances(_object_trace(objects.astype(np.int64)), [NO_TTL], engine=engine)
    hb, _ = hit_grid(dist, np.ones(len(objects), dtype=np.int64), 1, np.array(caps), np.array([NO_TTL]))
    assert [int(h) for h in hb[:-1, 0]] == [_lcs_hits(objects, c) for c in caps]
