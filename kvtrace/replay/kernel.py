"""The compiled replay kernels (numba, cached on disk): for large traces, and the fallback.

``_runs_kernel`` walks requests once. A Fenwick tree over requests holds, per request, how many of
its blocks it was the last to touch ("live" blocks). In a prefix-closed trace the live blocks of
request *r* are a suffix ``[cut[r], n_r)`` of its blocks (later requests re-touch prefixes), so a
run of request *i* that *r* last touched starts at ``cut[r]`` and its first block's depth is
``1 + (live blocks of requests after r)``: one Fenwick query per run. The run goes on exactly as
long as *i*'s blocks equal *r*'s (a block deeper in *r*'s path re-touched by a later request would
have taken *r*'s earlier blocks with it), so inside a run the walk compares the two rows instead
of looking blocks up: one lookup per run, sequential reads otherwise. The walk checks the trace is
prefix-closed as it goes (a looked-up block sits at the same depth after the same parent in the
request that last touched it; blocks after a new block are new) and gives up, returning None, at
the first violation.

``_blocks_kernel`` is the general fallback: a Fenwick tree over touch positions, one query and two
updates per block, running maxima of distance and age along each request.

Both also count, per TTL, the live blocks before each request (kept for the TTLs in ``keep``) and
the peak of the live blocks after a request (the working set's peak).
"""

from __future__ import annotations

import numba
import numpy as np

from kvtrace.analyze.working_set import TIME_BUCKETS
from kvtrace.replay.distances import Distances


@numba.njit(cache=True, nogil=True)
def _fen_add(fen, i, v):  # pragma: no cover - compiled
    i += 1
    n = len(fen)
    while i < n:
        fen[i] += v
        i += i & (-i)


@numba.njit(cache=True, nogil=True)
def _fen_prefix(fen, i):  # pragma: no cover - compiled
    """Sum of entries ``0..i`` inclusive (0 when ``i < 0``)."""
    s = 0
    i += 1
    while i > 0:
        s += fen[i]
        i -= i & (-i)
    return s


@numba.njit(cache=True, nogil=True)
def _grow(a, size):  # pragma: no cover - compiled
    b = np.empty(size, dtype=a.dtype)
    b[: len(a)] = a
    return b


@numba.njit(cache=True, nogil=True)
def _runs_kernel(t, offsets, ids, n_ids, ttls, keep, live, peak, done):  # pragma: no cover - compiled
    n = len(offsets) - 1
    last = np.full(n_ids, -1, dtype=np.int32)
    cut = np.zeros(n, dtype=np.int32)
    fen = np.zeros(n + 1, dtype=np.int64)
    total = 0
    T = len(ttls)
    ptr = np.zeros(T, dtype=np.int64)
    cap = n + n // 2 + 1024
    r_req = np.empty(cap, dtype=np.int32)
    r_first = np.empty(cap, dtype=np.int32)
    r_len = np.empty(cap, dtype=np.int32)
    r_src = np.empty(cap, dtype=np.int32)
    r_d = np.empty(cap, dtype=np.int32)
    R = 0
    NB = peak.shape[1]
    span = t[n - 1] - t[0] + 1 if n else 1
    for i in range(n):
        done[0] = i  # requests done so far, read by a watching thread
        if done[1]:  # the watcher asks it to stop (Ctrl-C, a cancelled command)
            return False, R, r_req, r_first, r_len, r_src, r_d
        b = (t[i] - t[0]) * NB // span  # the time bucket of the peaks
        a = offsets[i]
        m = offsets[i + 1] - a
        if R + m + 1 > cap:  # arrays grow only between requests, which keeps the
            cap = max(cap + cap // 2, R + m + 1)  # hot loop below free of reallocation
            r_req = _grow(r_req, cap)
            r_first = _grow(r_first, cap)
            r_len = _grow(r_len, cap)
            r_src = _grow(r_src, cap)
            r_d = _grow(r_d, cap)
        first_run = R
        src = n
        j = 0
        while j < m:
            x = ids[a + j]
            r = last[x]
            if r < 0:
                break
            # A run starts: r must be older than the previous run's, own x at depth j after the
            # same parent, and not have lost depth j to a later request yet.
            ro = offsets[r]
            rl = offsets[r + 1] - ro
            if r >= src or cut[r] != j or j >= rl or ids[ro + j] != x:
                return False, R, r_req, r_first, r_len, r_src, r_d
            if j > 0 and ids[ro + j - 1] != ids[a + j - 1]:
                return False, R, r_req, r_first, r_len, r_src, r_d
            e = j + 1
            while e < m and e < rl and ids[a + e] == ids[ro + e]:
                e += 1
            r_req[R] = i
            r_first[R] = j
            r_len[R] = e - j
            r_src[R] = r
            R += 1
            src = r
            for k in range(j, e):
                last[ids[a + k]] = i
            j = e
        while j < m:  # the rest of the request must be new blocks
            x = ids[a + j]
            if last[x] >= 0:
                return False, R, r_req, r_first, r_len, r_src, r_d
            last[x] = i
            j += 1
        for q in range(first_run, R):  # depths against the stack before the request
            r_d[q] = 1 + total - _fen_prefix(fen, r_src[q])
        for k in range(T):
            lim = t[i] - ttls[k]
            p = ptr[k]
            while p < i and t[p] < lim:
                p += 1
            ptr[k] = p
            before = total - _fen_prefix(fen, p - 1)
            if keep[k] >= 0:
                live[keep[k], i] = before
            hit = 0
            for q in range(first_run, R):
                if t[i] - t[r_src[q]] <= ttls[k]:
                    hit += r_len[q]
            after = before + m - hit
            if after > peak[k, b]:
                peak[k, b] = after
        for q in range(first_run, R):
            _fen_add(fen, r_src[q], -r_len[q])
            cut[r_src[q]] += r_len[q]
            total -= r_len[q]
        _fen_add(fen, i, m)
        total += m
    return True, R, r_req, r_first, r_len, r_src, r_d


@numba.njit(cache=True, nogil=True, inline="always")
def _weight(wt, x):  # pragma: no cover - compiled
    """Block ``x``'s weight: 1, or ``wt[x]`` in a weighted (sampled) walk."""
    if wt is None:
        return 1
    return wt[x]


@numba.njit(cache=True, nogil=True, inline="always")
def _depth(above, unit, wt):  # pragma: no cover - compiled
    """A block's stack depth: itself and what lies above it, in whole blocks (rounded up)."""
    if wt is None:
        return above + 1
    return (above + 2 * unit - 1) // unit


@numba.njit(cache=True, nogil=True, inline="always")
def _in_blocks(x, unit, wt):  # pragma: no cover - compiled
    """A weight sum in blocks: the count itself, or ``x / unit`` in a weighted walk."""
    if wt is None:
        return x
    return x / unit


@numba.njit(cache=True, nogil=True)
def _blocks_kernel(
    t, offsets, ids, n_ids, wt, unit, fen_dtype, ttls, keep, live, peak, unique, o_req, o_first, o_d, o_age, done
):  # pragma: no cover - compiled
    """``wt``: None, or each block's weight in ``1/unit`` of a block (a sample in which block
    ``x`` stands for ``wt[x] / unit`` blocks of the full trace: depths, live counts, peaks and
    unique counts are then weighted sums, a depth rounded up to whole blocks). Compiled apart for
    each: the exact walk pays nothing for the weights. ``fen_dtype``: of the Fenwick tree over
    touch positions, int32 counts for the exact walk (half the memory at 300 M blocks), int64
    weight sums else."""
    n = len(offsets) - 1
    N = len(ids)
    last_pos = np.full(n_ids, -1, dtype=np.int64)
    last_req = np.full(n_ids, -1, dtype=np.int64)
    fen = np.zeros(N + 1, dtype=fen_dtype)
    base = np.zeros(n + 1, dtype=np.int64)
    tmp_ids = np.empty(N, dtype=np.int64)
    tmp_pos = np.empty(N, dtype=np.int64)
    tmp_age = np.empty(N, dtype=np.int64)
    T = len(ttls)
    ptr = np.zeros(T, dtype=np.int64)
    total = 0
    P = 0
    R = 0
    NB = peak.shape[1]
    span = t[n - 1] - t[0] + 1 if n else 1
    for i in range(n):
        done[0] = i
        if done[1]:
            return R
        b = (t[i] - t[0]) * NB // span
        a = offsets[i]
        m = offsets[i + 1] - a
        base[i] = P
        dmax = 0
        amax = 0
        broken = False
        u = 0
        uw = 0
        for j in range(m):
            x = ids[a + j]
            if last_req[x] == i:  # repeated within the request: same depth as before
                if not broken:
                    o_req[R] = i
                    o_first[R] = j
                    o_d[R] = dmax
                    o_age[R] = amax
                    R += 1
                continue
            p = last_pos[x]
            age = -1
            if p < 0:
                broken = True
            else:
                age = t[i] - t[last_req[x]]
            if not broken:
                d = _depth(total - _fen_prefix(fen, p), unit, wt)
                if d > dmax:
                    dmax = d
                if age > amax:
                    amax = age
                o_req[R] = i
                o_first[R] = j
                o_d[R] = dmax
                o_age[R] = amax
                R += 1
            tmp_ids[u] = x
            tmp_pos[u] = p
            tmp_age[u] = age
            last_req[x] = i
            u += 1
            uw += _weight(wt, x)
        for k in range(T):
            lim = t[i] - ttls[k]
            q = ptr[k]
            while q < i and t[q] < lim:
                q += 1
            ptr[k] = q
            before = total - _fen_prefix(fen, base[q] - 1)
            if keep[k] >= 0:
                live[keep[k], i] = _in_blocks(before, unit, wt)
            hit = 0
            for v in range(u):
                if tmp_pos[v] >= 0 and tmp_age[v] <= ttls[k]:
                    hit += _weight(wt, tmp_ids[v])
            if before + uw - hit > peak[k, b]:
                peak[k, b] = before + uw - hit
        for k in range(u):
            if tmp_pos[k] >= 0:
                w = _weight(wt, tmp_ids[k])
                _fen_add(fen, tmp_pos[k], -w)
                total -= w
        for k in range(u):  # tail first: the head ends up most recent
            pos = P + u - 1 - k
            last_pos[tmp_ids[k]] = pos
            _fen_add(fen, pos, _weight(wt, tmp_ids[k]))
        total += uw
        P += u
        unique[i] = _in_blocks(uw, unit, wt)
    return R


def _keep_rows(ttls, keep):
    rows = np.full(len(ttls), -1, dtype=np.int64)
    kept = [tau for tau in ttls if tau in keep]
    for k, tau in enumerate(ttls):
        if tau in keep:
            rows[k] = kept.index(tau)
    return rows, kept


def run_fast(t, offsets, ids, n_ids, ttls, keep, done) -> Distances | None:
    """The run kernel; None if the trace turns out not to be prefix-closed. ``done``: an int64
    pair: the kernel keeps ``done[0]`` at the requests it has done, and stops when ``done[1]`` is
    set (what it returns then is not used)."""
    n = len(offsets) - 1
    rows, kept = _keep_rows(ttls, keep)
    live = np.zeros((len(kept), n), dtype=np.int32)
    peak = np.zeros((len(ttls), TIME_BUCKETS), dtype=np.int64)
    ok, R, r_req, r_first, r_len, r_src, r_d = _runs_kernel(
        t, offsets, ids, n_ids, np.asarray(ttls, dtype=np.int64), rows, live, peak, done
    )
    if not ok:
        return None
    req = r_req[:R]
    return Distances(
        req=req,
        first=r_first[:R],
        blocks=r_len[:R],
        d=r_d[:R],
        age=t[req] - t[r_src[:R]],
        unique=np.diff(offsets),
        live={tau: live[k] for k, tau in enumerate(kept)},
        peak_after={tau: int(peak[k].max()) for k, tau in enumerate(ttls)},
        peak_by_time={tau: peak[k] for k, tau in enumerate(ttls)},
        kernel="numba",
    )


def run_blocks(t, offsets, ids, n_ids, ttls, keep, done) -> Distances:
    """The block-by-block kernel: exact on any trace (single-block runs with ``d*`` and ``a*``);
    ``done`` as for :func:`run_fast`."""
    n, N = len(offsets) - 1, len(ids)
    rows, kept = _keep_rows(ttls, keep)
    live = np.zeros((len(kept), n), dtype=np.int64)
    peak = np.zeros((len(ttls), TIME_BUCKETS), dtype=np.int64)
    unique = np.zeros(n, dtype=np.int64)
    o_req = np.empty(N, dtype=np.int64)
    o_first = np.empty(N, dtype=np.int64)
    o_d = np.empty(N, dtype=np.int64)
    o_age = np.empty(N, dtype=np.int64)
    R = _blocks_kernel(
        t,
        offsets,
        ids,
        n_ids,
        None,
        1,
        np.int32,
        np.asarray(ttls, dtype=np.int64),
        rows,
        live,
        peak,
        unique,
        o_req,
        o_first,
        o_d,
        o_age,
        done,
    )
    return Distances(
        req=o_req[:R],
        first=o_first[:R],
        blocks=np.ones(R, dtype=np.int64),
        d=o_d[:R],
        age=o_age[:R],
        unique=unique,
        live={tau: live[k] for k, tau in enumerate(kept)},
        peak_after={tau: int(peak[k].max()) for k, tau in enumerate(ttls)},
        peak_by_time={tau: peak[k] for k, tau in enumerate(ttls)},
        kernel="numba-blocks",
    )


# -- the grid and the tier bands over runs (the compiled twins of grid.py and traffic.py) ----------


@numba.njit(cache=True, nogil=True)
def _grid_kernel(req, first, blocks, d, age, L, bs, caps, ttls, A_b, S_b, A_t, S_t, W_t, U_b, U_t):  # pragma: no cover
    """Accumulate per (TTL bin, capacity bin) the ramp counts and sums of ``grid.hit_grid``."""
    T = len(ttls)
    for q in range(len(req)):
        a = age[q]
        tb = 0
        while tb < T and ttls[tb] < a:
            tb += 1
        if tb == T:
            continue
        x0 = d[q] - 1
        ln = blocks[q]
        fi = first[q]
        Lq = L[req[q]]
        full = min(max(Lq // bs - fi, 0), ln)
        part = 0
        if full < ln:
            part = min(max(Lq - (fi + full) * bs, 0), bs)
        b = np.searchsorted(caps, x0, side="right")
        A_b[tb, b] += 1
        S_b[tb, b] += x0
        A_t[tb, b] += 1
        S_t[tb, b] += x0
        b = np.searchsorted(caps, x0 + ln, side="right")
        A_b[tb, b] -= 1
        S_b[tb, b] -= x0 + ln
        b = np.searchsorted(caps, x0 + full, side="right")
        A_t[tb, b] -= 1
        S_t[tb, b] -= x0 + full
        if part > 0:
            W_t[tb, np.searchsorted(caps, x0 + full + 1, side="left")] += part
        U_b[tb] += ln
        U_t[tb] += full * bs + part


@numba.njit(cache=True, nogil=True)
def _band_kernel(req, first, blocks, d, age, L, bs, bounds, ttl, hit_b, hit_t, live_hit):  # pragma: no cover
    """Per request and band ``(bounds[k], bounds[k+1]]``: hit blocks and tokens of runs not older
    than ``ttl``, and the blocks of those runs at any depth (``live_hit``)."""
    K = len(bounds) - 1
    for q in range(len(req)):
        if age[q] > ttl:
            continue
        i = req[q]
        x0 = d[q] - 1
        ln = blocks[q]
        fi = first[q]
        full = min(max(L[i] // bs - fi, 0), ln)
        part = 0
        if full < ln:
            part = min(max(L[i] - (fi + full) * bs, 0), bs)
        live_hit[i] += ln
        pb = 0
        pt = 0
        for k in range(K):
            B = bounds[k + 1]
            ub = min(max(B - x0, 0), ln)
            ut = bs * min(max(B - x0, 0), full)
            if B - x0 > full:
                ut += part
            hit_b[k, i] += ub - pb
            hit_t[k, i] += ut - pt
            pb = ub
            pt = ut


def grid_sums(dist, L, bs, caps, ttls):
    """The compiled ``grid.hit_grid`` accumulation: ``(A_b, S_b, A_t, S_t, W_t, U_b, U_t)``."""
    T, K = len(ttls), len(caps)
    arrs = [np.zeros((T + 1, K + 1), dtype=np.int64) for _ in range(5)] + [
        np.zeros(T + 1, dtype=np.int64) for _ in range(2)
    ]
    _grid_kernel(dist.req, dist.first, dist.blocks, dist.d, dist.age, L, bs, caps, ttls, *arrs)
    return arrs


def band_sums(dist, L, bs, bounds, ttl, n):
    """The compiled ``traffic.band_hits``: ``(hit blocks (K, n), hit tokens (K, n), live hits (n))``."""
    K = len(bounds) - 1
    hit_b = np.zeros((K, n), dtype=np.int32)
    hit_t = np.zeros((K, n), dtype=np.int64)
    live_hit = np.zeros(n, dtype=np.int32)
    _band_kernel(
        dist.req,
        dist.first,
        dist.blocks,
        dist.d,
        dist.age,
        L,
        bs,
        np.asarray(bounds, dtype=np.int64),
        ttl,
        hit_b,
        hit_t,
        live_hit,
    )
    return hit_b, hit_t, live_hit


@numba.njit(cache=True, nogil=True)
def _prev_gap(t, code, n_codes, out):  # pragma: no cover - compiled
    last = np.full(n_codes, -1, dtype=np.int64)
    for i in range(len(t)):
        c = code[i]
        if last[c] >= 0:
            out[i] = (t[i] - t[last[c]]) / 1e6
        last[c] = i


def session_gaps(t_us, session):
    """Seconds since the previous request of the same session (NaN for a session's first)."""
    code, n_codes = dense_codes(session)
    out = np.full(len(t_us), np.nan)
    _prev_gap(t_us, code, n_codes, out)
    return out


def dense_codes(values):
    lo = int(values.min()) if len(values) else 0
    hi = int(values.max()) if len(values) else 0
    if lo >= 0 and hi < 4 * len(values) + 1024:
        return values, hi + 1
    uniq, inv = np.unique(values, return_inverse=True)
    return inv.reshape(-1), len(uniq)
