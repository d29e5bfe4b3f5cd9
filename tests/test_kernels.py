"""Compiled helpers of the derivation against their plain-Python meaning."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.analyze._kernels import first_seen_codes, group_order

# keys from a few values (many repeats), and extremes of 64 bits
keys = st.lists(st.sampled_from([0, 1, 2, 17, 2**32, 2**63 - 1, 2**64 - 1, 12345678901234567]), max_size=200)


@settings(max_examples=200, deadline=None)
@given(keys, st.integers(0, 2**64 - 1))
def test_first_seen_codes_number_keys_as_they_first_appear(values, extra):
    values = values + [extra] + values[::-1]
    seen: dict[int, int] = {}
    expect = [seen.setdefault(v, len(seen)) for v in values]
    codes, first = first_seen_codes(np.array(values, dtype=np.uint64))
    assert codes.tolist() == expect
    assert first.tolist() == [values.index(v) for v in seen]


@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.int32])
def test_first_seen_codes_of_many_distinct_keys(dtype):
    # more keys than the table's first sizes (it doubles), a wide spread and repeats after a gap;
    # polars hashes are uint64, chain keys int64 or int32
    rng = np.random.default_rng(3)
    values = rng.integers(0, min(np.iinfo(dtype).max, 2**63 - 1), 50_000, dtype=np.int64).astype(dtype)
    values = np.concatenate((values, values[::7]))
    codes, first = first_seen_codes(values)
    uniq, idx, inv = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(idx, kind="stable")] = np.arange(len(uniq))
    assert (codes == rank[inv.ravel()]).all() and (first == np.sort(idx)).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=80))
def test_group_order_is_a_stable_sort_by_code(code):
    code = np.array(code, dtype=np.int64)
    order, prev = group_order(code, int(code.max()) + 1 if len(code) else 0)
    assert order.tolist() == np.lexsort((np.arange(len(code)), code)).tolist()
    expect = [max([j for j in range(i) if code[j] == code[i]], default=-1) for i in range(len(code))]
    assert prev.tolist() == expect


@pytest.mark.parametrize(
    "values",
    [
        np.zeros(0, np.int64),
        [5],
        [3, -1, 3, 2**40, -1],
        np.arange(5000, dtype=np.int32) % 977,
        np.array([2**63 + 1, 2**64 - 1, 2**63 + 1, 7], dtype=np.uint64),
        [True, False, True],
        ["a", "b", "a"],
        [0.5, 0.5, 1.0],
    ],
)
def test_distinct_count(values):
    from kvtrace.analyze.working_set import distinct_count

    assert distinct_count(np.asarray(values)) == len(set(np.asarray(values).tolist()))
    k = len(set(np.asarray(values).tolist()))
    for stop in (1, 3, 10, 5000):  # counting stops at ``stop``: min(distinct, stop) either way
        assert distinct_count(np.asarray(values), stop=stop) == min(k, stop)


def test_distinct_count_stops_in_a_later_chunk_or_never():
    from kvtrace.analyze.working_set import distinct_count

    spread = np.repeat(np.arange(20), 300)  # 4 distinct in the first chunk of 1,024 values
    assert distinct_count(spread, stop=10) == 10 and distinct_count(spread, stop=50) == 20
    assert distinct_count(np.repeat(np.arange(5), 1000), stop=10) == 5  # every chunk, never reached
