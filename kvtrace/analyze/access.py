"""Block accesses grouped into runs: the compact form every reuse analysis reads.

A request touches its prompt's blocks all at once. Consecutive blocks of one request that were
last touched by the same earlier request, and will next be touched by the same later request,
behave identically in every TTL question (same age, same next reuse), so they are kept as one
*run*: cost grows with runs, a few per request, rather than with blocks. Runs come either from
a block trace's ``hash_ids`` (:func:`runs_from_blocks`, one compiled pass over the blocks) or
straight from derived prefix chains (``kvtrace.analyze.chains``), which never need the blocks.

Times are compared in integer microseconds, and an age equal to the TTL is still a hit (the
issue's "not older than the TTL"), so every module and the replay engine agree to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace

NEVER = np.iinfo(np.int64).max  # the age of a first access, the gap to no next access


@dataclass
class AccessRuns:
    """Runs of block accesses, in request order and within a request in block order.

    Attributes:
        req: request index (time order) of the run.
        first: index of the run's first block within its request.
        blocks: number of blocks in the run.
        tokens: prompt tokens the run carries: ``min(L, (first+blocks)*B) - min(L, first*B)``
            with ``L`` the request's input length, so a leading run of ``r`` blocks carries
            ``min(input_length, r*B)`` tokens, the issue's hit-token rule.
        prev: request that last touched these blocks before, -1 for a first access.
        next: request that touches them next, -1 if none.
        dup: the blocks repeat earlier blocks of the same request (never in prefix-chained
            traces; such accesses take part in hits but not in the working set).
    """

    req: np.ndarray
    first: np.ndarray
    blocks: np.ndarray
    tokens: np.ndarray
    prev: np.ndarray
    next: np.ndarray
    dup: np.ndarray

    def __len__(self) -> int:
        return len(self.req)


def ts_us(trace: BlockTrace) -> np.ndarray:
    """Request times as integer microseconds (exact comparisons with a TTL)."""
    cached = trace.meta.get("_ts_us")
    if cached is None or len(cached) != trace.n_requests:
        cached = np.rint(trace.ts * 1e6).astype(np.int64)
        trace.meta["_ts_us"] = cached
    return cached


def run_tokens(trace: BlockTrace, req: np.ndarray, first: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Tokens carried by runs (see :class:`AccessRuns`)."""
    return tokens_of_runs(trace.input_length, trace.block_size, req, first, blocks)


def tokens_of_runs(input_length: np.ndarray, B: int, req, first, blocks) -> np.ndarray:
    """:func:`run_tokens` from a trace's prompt lengths and block size."""
    L = input_length[req]
    return np.minimum(L, (first + blocks) * B) - np.minimum(L, first * B)


def _dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Ids mapped into ``[0, n)`` (kept as they are when already small and non-negative)."""
    if ids.size == 0:
        return ids, 0
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < 2 * ids.size + (1 << 16):
        return ids, hi + 1
    uniq, inv = np.unique(ids, return_inverse=True)
    return inv.astype(np.int64, copy=False), len(uniq)


def runs_from_blocks(trace: BlockTrace) -> AccessRuns:
    """Link every block access to its block's previous and next access, grouped into runs."""
    from kvtrace.analyze._kernels import link_runs

    ids, n_ids = _dense_ids(trace.hash_ids)
    # Scratch for each block's previous access: 4 bytes a block while request indexes fit.
    prev = np.empty(len(ids), dtype=np.int32 if trace.n_requests < 2**31 - 1 else np.int64)
    req, first, blocks, prv, nxt, dup = link_runs(ids, trace.offsets, max(n_ids, 1), prev)
    del prev
    return AccessRuns(
        req=req, first=first, blocks=blocks, tokens=run_tokens(trace, req, first, blocks), prev=prv, next=nxt, dup=dup
    )


def access_runs(trace: BlockTrace) -> AccessRuns:
    """The trace's runs: made by derived chains (all at once here; :func:`run_chunks` takes them
    a chunk at a time), else computed once from ``hash_ids`` and kept."""
    source = trace.meta.get("_run_source")
    if source is not None:
        return source(0, trace.n_requests)
    runs = getattr(trace, "runs", None)
    if runs is None:
        runs = trace.meta.get("_runs")
    if runs is None:
        runs = runs_from_blocks(trace)
        trace.meta["_runs"] = runs
    return runs


@dataclass
class RunTimes:
    """Per-run times in microseconds (``NEVER`` when there is no such access).

    Attributes:
        age: time since the blocks' previous access (their reuse time).
        eff_age: the running maximum of ``age`` along the request up to this run: the run is a
            hit under an idle TTL ``tau`` exactly when ``eff_age <= tau`` (the hit run of a request
            stops at its first block that is new or older than the TTL).
        next_gap: time until the blocks' next access.
    """

    age: np.ndarray
    eff_age: np.ndarray
    next_gap: np.ndarray


# Requests per chunk of a pass over the runs in time order: the times of one chunk's runs are
# all that a pass holds beside the trace.
CHUNK_REQUESTS = 1 << 16


@dataclass
class RunChunk:
    """The runs of the requests ``[lo, hi)`` (slices of the trace's runs, or made for the chunk
    by derived chains) and their times."""

    lo: int
    hi: int
    runs: AccessRuns
    times: RunTimes


def run_chunks(trace: BlockTrace, requests: int = CHUNK_REQUESTS):
    """The trace's runs with their times, in time order, a chunk of about ``requests`` requests
    at a time (requests of one time are never split across chunks). Every analysis that reads
    run times takes them so; the result never depends on ``requests``."""
    source = trace.meta.get("_run_source")  # derived chains make their runs per chunk
    runs = access_runs(trace) if source is None else None
    t = ts_us(trace)
    n = trace.n_requests
    lo = 0
    while lo < n:
        hi = min(n, lo + max(1, requests))
        if hi < n and t[hi] == t[hi - 1]:
            hi = int(np.searchsorted(t, t[hi - 1], side="right"))
        if source is not None:
            part = source(lo, hi)
        else:
            r0, r1 = np.searchsorted(runs.req, [lo, hi])
            part = AccessRuns(*(getattr(runs, f)[r0:r1] for f in _RUN_FIELDS))
        yield RunChunk(lo, hi, part, _times(t, part))
        lo = hi


_RUN_FIELDS = ("req", "first", "blocks", "tokens", "prev", "next", "dup")


def _times(t: np.ndarray, runs: AccessRuns) -> RunTimes:
    """Times of runs that hold whole requests (``t``: every request's time, µs). ``eff_age``
    is the running maximum of the age over a request's runs so far (times are non-decreasing)."""
    from kvtrace.analyze._kernels import run_times

    age, eff, gap = (np.empty(len(runs), dtype=np.int64) for _ in range(3))
    run_times(t, runs.req, runs.prev, runs.next, NEVER, age, eff, gap)
    return RunTimes(age=age, eff_age=eff, next_gap=gap)


class WeightAtOrBelow:
    """Token and block weight of runs whose time (µs) is at or below each of sorted ``limits``,
    summed chunk by chunk (:meth:`add`): one bucket per limit, and one beyond the last."""

    def __init__(self, limits) -> None:
        self.limits = np.asarray(limits, dtype=np.int64)
        self.tokens = np.zeros(len(self.limits) + 1, dtype=np.int64)
        self.blocks = np.zeros(len(self.limits) + 1, dtype=np.int64)

    def add(self, times: np.ndarray, tokens: np.ndarray, blocks: np.ndarray) -> None:
        k = np.searchsorted(self.limits, times, side="left")  # the first limit at or above the time
        self.tokens += np.bincount(k, weights=tokens, minlength=len(self.tokens)).astype(np.int64)
        self.blocks += np.bincount(k, weights=blocks, minlength=len(self.blocks)).astype(np.int64)

    def at_or_below(self) -> tuple[np.ndarray, np.ndarray]:
        """Token and block weight at or below each limit."""
        return np.cumsum(self.tokens)[:-1], np.cumsum(self.blocks)[:-1]


def compact_dtype(a: np.ndarray) -> np.dtype:
    """The type :func:`compact_ints` gives ``a``: 32-bit integers for 64-bit ones when every
    value fits, else ``a``'s own."""
    if a.dtype != np.int64 or (len(a) and (int(a.min()) < -(2**31) or int(a.max()) >= 2**31)):
        return a.dtype
    return np.dtype(np.int32)


def compact_ints(a: np.ndarray) -> np.ndarray:
    """64-bit integers as 32 bits when every value fits (tokens of a request, indexes, codes), so
    per-request arrays take half the memory; any other array as it is."""
    dtype = compact_dtype(a)
    return a if dtype == a.dtype else a.astype(dtype)


def seconds_to_us(tau: float | None) -> int:
    """A TTL in seconds as integer microseconds; None or infinity means no TTL."""
    if tau is None or tau == float("inf"):
        return NEVER - 1
    return min(int(round(float(tau) * 1e6)), NEVER - 1)
