"""LRU stack distances and ages of every block access, grouped into runs: one pass, exact.

For request *i* touching block *b*: the stack distance ``d`` is 1 + the number of distinct blocks
touched since *b*'s last access (the depth of *b* in the LRU stack, 1 = most recent), and the age
is the time since that access. Under LRU with capacity *C* blocks and an idle TTL *tau*, *b* is
cached exactly when ``d <= C`` and ``age <= tau`` (the blocks an access moves past are newer, so
they expire after *b*: the cache always holds the top of the stack, minus expired blocks).

A request's hit run stops at its first miss, so the running maxima ``d*`` and ``a*`` along the
request decide. In a *prefix-closed* trace (a block id always follows the same parent id, which
every block-hash format guarantees: ids are prefix-chained) they need no running maximum: the
blocks a request shares with the request that last touched them form a *run* whose distances are
consecutive, ``d, d+1, ...``, and later runs are deeper and older. So a run needs one query, not
one per block, and the cost grows with requests rather than tokens.

Two exact engines produce the same :class:`Distances`:

- ``numpy`` (vectorized, starts fast): the depth of a run from request *r* seen by request *i* is
  ``1 + (blocks added by requests r+1..i-1) - (those of them already re-touched before i)``; the
  second term is an offline dominance sum over earlier runs, answered level by level over a
  merge-sort tree with ``searchsorted``. Live counts under a TTL are prefix sums.
- ``numba`` (compiled, for large traces): a Fenwick tree over requests holding each request's
  live block count; see :mod:`kvtrace.replay.kernel`.

A trace that is not prefix-closed falls back to a block-by-block compiled kernel (exact, slower).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.working_set import TIME_BUCKETS, time_buckets
from kvtrace.errors import BadTraceInput

NO_TTL = 1 << 62  # a TTL in µs that never expires anything
NUMPY_MAX_BLOCKS = 3_000_000  # above this, the compiled engine pays for its start-up


@dataclass
class Distances:
    """Runs of block accesses with their stack distance and age (see the module docstring).

    Attributes:
        req: request of each run (non-decreasing).
        first: index of the run's first block within its request.
        blocks: blocks in the run; block ``k`` of the run has distance ``d + k``.
        d: stack distance of the run's first block (1-based, in blocks).
        age: µs since the run's blocks were last touched.
        unique: distinct blocks per request.
        live: per kept TTL in µs, the blocks not older than it just before each request
            (``NO_TTL`` = every block seen so far).
        peak_after: per TTL in µs, the most blocks not older than it right after a request (the
            peak working set in blocks).
        peak_by_time: per TTL in µs, the same peak within each of ``TIME_BUCKETS`` equal spans
            of the trace's time (0 where a span has no request): whether the working set settled.
        kernel: which engine produced them: ``numpy``, ``numba`` or ``numba-blocks`` (the
            block-by-block fallback for traces that are not prefix-closed; its runs are single
            blocks carrying the running maxima ``d*`` and ``a*``).
    """

    req: np.ndarray
    first: np.ndarray
    blocks: np.ndarray
    d: np.ndarray
    age: np.ndarray
    unique: np.ndarray
    live: dict[int, np.ndarray] = field(default_factory=dict)
    peak_after: dict[int, int] = field(default_factory=dict)
    peak_by_time: dict[int, np.ndarray] = field(default_factory=dict)
    kernel: str = "numpy"
    t_us: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.req)


def ts_us(trace: BlockTrace) -> np.ndarray:
    """Request times in integer microseconds, so an age equal to a TTL compares exactly."""
    return np.rint(trace.ts * 1e6).astype(np.int64)


def dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Block ids mapped into ``[0, n)`` (kept when already small and non-negative)."""
    if ids.size == 0:
        return ids, 0
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < 4 * ids.size + (1 << 16):
        return ids, hi + 1
    uniq, inv = np.unique(ids, return_inverse=True)
    return inv.astype(np.int64, copy=False).reshape(-1), len(uniq)


def compute_distances(
    trace: BlockTrace, ttls_us: list[int], engine: str = "auto", keep: set[int] | None = None, on_progress=None
) -> Distances:
    """Stack distances, ages and live counts of ``trace`` (one pass).

    Args:
        trace: the block trace, requests in time order.
        ttls_us: TTLs (µs) for which to count live blocks (peaks always); ``NO_TTL`` for none.
        engine: ``auto`` (numpy up to ``NUMPY_MAX_BLOCKS`` block accesses, else numba),
            ``numpy``, ``numba`` or ``blocks`` (the block-by-block kernel, for checks).
        keep: the TTLs whose live counts before each request are kept (default: all).
        on_progress: called with the fraction of requests done, a few times a second, while a
            compiled engine runs (the vectorized one is over in a second or two).
    """
    if np.any(np.diff(trace.ts) < 0):
        raise BadTraceInput(
            trace.name,
            None,
            "request times go backwards",
            field="ts",
            hint="sort the requests by time before replaying",
        )
    t = ts_us(trace)
    ttls = sorted({int(x) for x in ttls_us} | {NO_TTL})
    keep = set(ttls) if keep is None else {int(x) for x in keep}
    if engine == "auto":
        engine = "numpy" if trace.n_blocks <= NUMPY_MAX_BLOCKS else "numba"
    if engine == "numpy":
        res = _numpy_engine(trace, t, ttls, keep)
        if res is not None:
            res.t_us = t
            return res
        engine = "blocks"
    from kvtrace.replay import kernel

    ids, n_ids = dense_ids(trace.hash_ids)
    done = np.zeros(2, dtype=np.int64)  # requests done; a stop request (see _watched)
    if engine == "numba":
        res = _watched(
            lambda: kernel.run_fast(t, trace.offsets, ids, n_ids, ttls, keep, done), done, trace.n_requests, on_progress
        )
        if res is not None:
            res.t_us = t
            return res
    res = _watched(
        lambda: kernel.run_blocks(t, trace.offsets, ids, n_ids, ttls, keep, done), done, trace.n_requests, on_progress
    )
    res.t_us = t
    return res


def _watched(run, done: np.ndarray, n: int, on_progress):
    """``run()``, a compiled kernel that keeps ``done[0]`` at the requests it has done; with
    ``on_progress``, run in a thread (the kernels release the GIL) while this one reports the
    fraction done a few times a second. If this thread is interrupted, ``done[1]`` asks the
    kernel to stop, and it is waited for: no kernel outlives its replay."""
    if on_progress is None:
        return run()
    import threading

    out: dict = {}

    def target():
        try:
            out["result"] = run()
        except BaseException as e:  # noqa: BLE001 - raised again in the calling thread
            out["error"] = e

    worker = threading.Thread(target=target, name="kvtrace-replay-kernel", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            on_progress(min(1.0, int(done[0]) / max(n, 1)))
            worker.join(0.2)
    finally:
        if worker.is_alive():  # Ctrl-C or an error here: the kernel stops at its next request
            done[1] = 1
            worker.join()
    if "error" in out:
        raise out["error"]
    return out["result"]


# -- the vectorized engine ---------------------------------------------------------------------


def _numpy_engine(trace: BlockTrace, t: np.ndarray, ttls: list[int], keep: set[int]) -> Distances | None:
    """Distances by sorting and dominance sums; None if the trace is not prefix-closed."""
    n, off, ids = trace.n_requests, trace.offsets, trace.hash_ids
    N = len(ids)
    counts = np.diff(off)
    req = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = np.arange(N, dtype=np.int64) - off[req]
    # The previous access of the same block: neighbours in a stable sort by id.
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    prev = np.full(N, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    del order, same
    seen = np.flatnonzero(prev >= 0)
    p = prev[seen]
    del prev
    # Prefix-closed: a block recurs at the same depth, after the same parent, in another request.
    ok = (pos[p] == pos[seen]) & (req[p] != req[seen])
    deep = pos[seen] > 0
    ok[deep] &= ids[p[deep] - 1] == ids[seen[deep] - 1]
    if not ok.all():
        return None
    src = req[p]
    # Runs: consecutive seen blocks of one request with the same last toucher.
    sreq, spos = req[seen], pos[seen]
    start = np.ones(len(seen), dtype=bool)
    start[1:] = (spos[1:] == 0) | (src[1:] != src[:-1]) | (sreq[1:] != sreq[:-1])
    starts = np.flatnonzero(start)
    r_req, r_src, r_first = sreq[starts], src[starts], spos[starts]
    r_len = np.diff(np.append(starts, len(seen)))
    del req, pos, seen, p, src, sreq, spos, start
    U = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=U[1:])
    # Each run's depth: the blocks requests r+1..i-1 added, less those re-touched before i.
    qp = np.searchsorted(r_req, r_req, side="left")  # runs (events) of requests before i
    d = 1 + (U[r_req] - U[r_src + 1]) - _dominance_sum(r_src, r_len, qp, r_src)
    # Live blocks before request i under a TTL: the blocks requests r0..i-1 touched (r0 the first
    # within the TTL), less those re-touched before i. A run (request i', source r) counts once
    # i' < i, unless its source has left the window by then (t_r < t_i - TTL, i.e. i >= e).
    killed = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r_req, weights=r_len, minlength=n).astype(np.int64), out=killed[1:])
    live = {NO_TTL: U[:n] - killed[:n]}
    for tau in ttls:
        if tau == NO_TTL:
            continue
        r0 = np.searchsorted(t, t - tau, side="left")
        e = np.searchsorted(t, t[r_src] + tau, side="right")
        gone = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(
            np.bincount(np.maximum(r_req + 1, e), weights=r_len, minlength=n + 1)[: n + 1].astype(np.int64), out=gone
        )
        live[tau] = (U[:n] - U[r0]) - (killed[:n] - gone[:n])
    age = t[r_req] - t[r_src]
    peak, by_time = {}, {}
    bucket = time_buckets(t)
    for tau in ttls:
        ok = age <= tau
        hit = np.bincount(r_req[ok], weights=r_len[ok], minlength=n).astype(np.int64)
        by_time[tau] = np.zeros(TIME_BUCKETS, dtype=np.int64)
        np.maximum.at(by_time[tau], bucket, live[tau] + counts - hit)
        peak[tau] = int(by_time[tau].max())
    return Distances(
        req=r_req,
        first=r_first,
        blocks=r_len,
        d=d,
        age=age,
        unique=counts.astype(np.int64),
        live={k: v for k, v in live.items() if k in keep},
        peak_after=peak,
        peak_by_time=by_time,
        kernel="numpy",
    )


def _dominance_sum(ev_r: np.ndarray, ev_w: np.ndarray, q_p: np.ndarray, q_r: np.ndarray) -> np.ndarray:
    """For each query, ``sum(ev_w[e] for e < q_p if ev_r[e] > q_r)``.

    The prefix ``[0, q_p)`` splits into at most one aligned block of size ``2**l`` per level
    ``l`` (the set bits of ``q_p``); at each level the events are sorted by (block, r), so a
    block's events above ``q_r`` are one ``searchsorted`` and a difference of prefix sums.
    """
    E = len(ev_r)
    out = np.zeros(len(q_p), dtype=np.int64)
    if E == 0 or len(q_p) == 0:
        return out
    idx = np.arange(E, dtype=np.int64)
    ev_r = ev_r.astype(np.int64)
    for lv in range(E.bit_length()):
        has = np.flatnonzero((q_p >> lv) & 1)
        if has.size == 0:
            continue
        key = ((idx >> lv) << 32) | ev_r
        o = np.argsort(key)
        skey = key[o]
        cs = np.zeros(E + 1, dtype=np.int64)
        np.cumsum(ev_w[o], out=cs[1:])
        blk = (q_p[has] >> lv) - 1
        lo = np.searchsorted(skey, (blk << 32) | (q_r[has] + 1), side="left")
        out[has] += cs[(blk + 1) << lv] - cs[lo]
    return out
