"""Exact weighted quantiles (kvtrace.analyze.quantile) against a sort and a cumulative sum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.analyze.quantile import TopQuantile, smallest_reaching


def _oracle(v: np.ndarray, w: np.ndarray, x: float) -> int | None:
    order = np.argsort(v, kind="stable")
    cw = np.cumsum(w[order])
    if not len(v) or cw[-1] < x:
        return None
    return int(v[order][np.searchsorted(cw, x, side="left")])


@st.composite
def weighted(draw):
    n = draw(st.integers(1, 60))
    scale = draw(st.sampled_from([4, 10, 1000, 10**12]))  # one log bin per value, or wide bins
    v = np.array(draw(st.lists(st.integers(0, scale), min_size=n, max_size=n)), dtype=np.int64)
    w = np.array(draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)), dtype=np.float64)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=20)))
    return v, w, [0, *cuts, n]


def _pieces(v, w, cuts):
    return [(v[a:b], w[a:b]) for a, b in zip(cuts, cuts[1:])]


@settings(max_examples=200, deadline=None)
@given(weighted(), st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_smallest_reaching_equals_the_sorted_cumulative_sum(data, q):
    v, w, cuts = data
    x = q * float(w.sum())
    pieces = lambda: ([p] for p in _pieces(v, w, cuts))  # noqa: E731
    assert smallest_reaching(pieces, [[x]])[0][0] == _oracle(v, w, x)


@settings(max_examples=300, deadline=None)
@given(weighted(), st.sampled_from([0.9, 0.99, 1.0]), st.sampled_from([1, 3, 1 << 20]))
def test_top_quantile_in_one_pass_equals_the_sorted_cumulative_sum(data, q, buffer):
    # a buffer of 1 or 3 values drops what cannot be the answer after almost every piece
    v, w, cuts = data
    total = float(w.sum())
    top = TopQuantile(total, q * total, buffer=buffer)
    for pv, pw in _pieces(v, w, cuts):
        top.add(pv, pw)
    assert top.result() == _oracle(v, w, q * total)


def test_top_quantile_refuses_weights_that_differ_from_its_total():
    top = TopQuantile(10.0, 9.9)
    top.add(np.array([1, 2]), np.array([4.0, 5.0]))
    with pytest.raises(ValueError, match="differ from the total"):
        top.result()


def test_top_quantile_of_a_rising_series_where_most_values_stay_candidates():
    # a level that rises at every event (no TTL): every value of the top half can be the answer
    v = np.arange(20_000, dtype=np.int64)
    w = np.ones(len(v))
    top = TopQuantile(float(len(v)), 0.5 * len(v), buffer=4)
    for k in range(0, len(v), 7):
        top.add(v[k : k + 7], w[k : k + 7])
    assert top.result() == _oracle(v, w, 0.5 * len(v))


def _log_bin_oracle(v: np.ndarray) -> np.ndarray:
    # the bin's definition: the value below 2**9, else bit length and the 8 bits after the top one
    e = np.array([int(x).bit_length() for x in v], dtype=np.int64)
    shift = np.maximum(e - 9, 0)
    return np.where(v < 512, v, (e - 7) * 256 + (v >> shift) - 256)


def test_log_bins_follow_their_definition_and_ranges():
    from kvtrace.analyze._kernels import log_bins
    from kvtrace.analyze.quantile import _log_bin_range

    rng = np.random.default_rng(5)
    edges = [x for k in range(63) for x in (2**k - 1, 2**k, 2**k + 1)] + [2**63 - 1]
    v = np.concatenate((edges, rng.integers(0, 2**63 - 1, 2000), rng.integers(0, 5000, 2000))).astype(np.int64)
    b = np.empty(len(v), dtype=np.int64)
    assert log_bins(v, 8, b) == int(b.max())
    assert (b == _log_bin_oracle(v)).all()
    small = v[v < 2**31]
    b32 = np.empty(len(small), dtype=np.int64)
    log_bins(small.astype(np.int32), 8, b32)  # 32-bit values (token counts) bin alike
    assert (b32 == _log_bin_oracle(small)).all()
    order = np.argsort(v)
    assert (np.diff(b[order]) >= 0).all()  # monotone
    for x, k in zip(v.tolist(), b.tolist()):
        lo, hi = _log_bin_range(k)
        assert lo <= x <= hi


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 10**12), min_size=1, max_size=400),
    st.lists(st.floats(0, 1), min_size=1, max_size=5),
)
def test_linear_quantiles_are_numpys_to_the_bit(values, qs):
    from kvtrace.analyze import spill
    from kvtrace.analyze.quantile import linear_quantiles

    v = np.array(values, dtype=np.int64)
    want = np.quantile(v / 1e6, qs).tolist()
    assert linear_quantiles(spill.spill(v), qs, scale=1e6) == want
    assert linear_quantiles(v, [0.5, 0.99]) == np.quantile(v.astype(float), [0.5, 0.99]).tolist()
    assert linear_quantiles(v[:0], [0.5]) == [None]
