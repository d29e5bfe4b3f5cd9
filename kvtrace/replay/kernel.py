"""The compiled replay kernels (numba, cached on disk): for large traces, and the fallback.

``_runs_kernel`` walks requests once. A Fenwick tree over requests holds, per request, how many of
its blocks it was the last to touch ("live" blocks). In a prefix-closed trace the live blocks of
request *r* are a suffix ``[cut[r], n_r)`` of its blocks (later requests re-touch prefixes), so a
run of request *i* that *r* last touched starts at ``cut[r]`` and its first block's depth is
``1 + (live blocks of requests after r)``: one Fenwick query per run. The walk checks the trace
is prefix-closed as it goes (each re-touched block sits at the same depth after the same parent
as in the request that last touched it) and gives up, returning None, at the first violation.

``_blocks_kernel`` is the general fallback: a Fenwick tree over touch positions, one query and two
updates per block, running maxima of distance and age along each request.
"""

from __future__ import annotations

import numba
import numpy as np

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
    b[:len(a)] = a
    return b


@numba.njit(cache=True, nogil=True)
def _runs_kernel(t, offsets, ids, n_ids, ttls, live):  # pragma: no cover - compiled
    n = len(offsets) - 1
    last = np.full(n_ids, -1, dtype=np.int32)
    cut = np.zeros(n, dtype=np.int32)
    fen = np.zeros(n + 1, dtype=np.int64)
    total = 0
    T = len(ttls)
    ptr = np.zeros(T, dtype=np.int64)
    cap = n + 1024
    r_req = np.empty(cap, dtype=np.int32)
    r_first = np.empty(cap, dtype=np.int32)
    r_len = np.empty(cap, dtype=np.int32)
    r_src = np.empty(cap, dtype=np.int32)
    r_d = np.empty(cap, dtype=np.int64)
    R = 0
    for i in range(n):
        a = offsets[i]
        m = offsets[i + 1] - a
        first_run = R
        src = -1
        j = 0
        while j < m:
            x = ids[a + j]
            r = last[x]
            if r < 0:
                break
            if r == i:
                return False, R, r_req, r_first, r_len, r_src, r_d
            ro = offsets[r]
            if j >= offsets[r + 1] - ro or ids[ro + j] != x:
                return False, R, r_req, r_first, r_len, r_src, r_d
            if j > 0 and ids[ro + j - 1] != ids[a + j - 1]:
                return False, R, r_req, r_first, r_len, r_src, r_d
            if r != src:
                if (src >= 0 and r > src) or cut[r] != j:
                    return False, R, r_req, r_first, r_len, r_src, r_d
                if R == cap:
                    cap *= 2
                    r_req = _grow(r_req, cap)
                    r_first = _grow(r_first, cap)
                    r_len = _grow(r_len, cap)
                    r_src = _grow(r_src, cap)
                    r_d = _grow(r_d, cap)
                r_req[R] = i
                r_first[R] = j
                r_len[R] = 0
                r_src[R] = r
                R += 1
                src = r
            r_len[R - 1] += 1
            last[x] = i
            j += 1
        while j < m:                       # the rest of the request must be new blocks
            x = ids[a + j]
            if last[x] >= 0:
                return False, R, r_req, r_first, r_len, r_src, r_d
            last[x] = i
            j += 1
        for q in range(first_run, R):      # depths against the stack before the request
            r_d[q] = 1 + total - _fen_prefix(fen, r_src[q])
        for k in range(T):
            lim = t[i] - ttls[k]
            p = ptr[k]
            while p < i and t[p] < lim:
                p += 1
            ptr[k] = p
            live[k, i] = total - _fen_prefix(fen, p - 1)
        for q in range(first_run, R):
            _fen_add(fen, r_src[q], -r_len[q])
            cut[r_src[q]] += r_len[q]
            total -= r_len[q]
        _fen_add(fen, i, m)
        total += m
    return True, R, r_req, r_first, r_len, r_src, r_d


@numba.njit(cache=True, nogil=True)
def _blocks_kernel(t, offsets, ids, n_ids, ttls, live, unique, o_req, o_first, o_d, o_age):  # pragma: no cover
    n = len(offsets) - 1
    N = len(ids)
    last_pos = np.full(n_ids, -1, dtype=np.int64)
    last_req = np.full(n_ids, -1, dtype=np.int64)
    fen = np.zeros(N + 1, dtype=np.int32)
    base = np.zeros(n + 1, dtype=np.int64)
    tmp_ids = np.empty(N, dtype=np.int64)
    tmp_pos = np.empty(N, dtype=np.int64)
    T = len(ttls)
    ptr = np.zeros(T, dtype=np.int64)
    total = 0
    P = 0
    R = 0
    for i in range(n):
        a = offsets[i]
        m = offsets[i + 1] - a
        base[i] = P
        dmax = 0
        amax = 0
        broken = False
        u = 0
        for j in range(m):
            x = ids[a + j]
            if last_req[x] == i:           # repeated within the request: same depth as before
                if not broken:
                    o_req[R] = i
                    o_first[R] = j
                    o_d[R] = dmax
                    o_age[R] = amax
                    R += 1
                continue
            p = last_pos[x]
            if p < 0:
                broken = True
            if not broken:
                d = total - _fen_prefix(fen, p) + 1
                age = t[i] - t[last_req[x]]
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
            last_req[x] = i
            u += 1
        for k in range(T):
            lim = t[i] - ttls[k]
            q = ptr[k]
            while q < i and t[q] < lim:
                q += 1
            ptr[k] = q
            live[k, i] = total - _fen_prefix(fen, base[q] - 1)
        for k in range(u):
            if tmp_pos[k] >= 0:
                _fen_add(fen, tmp_pos[k], -1)
                total -= 1
        for k in range(u):                 # tail first: the head ends up most recent
            pos = P + u - 1 - k
            last_pos[tmp_ids[k]] = pos
            _fen_add(fen, pos, 1)
        total += u
        P += u
        unique[i] = u
    return R


def run_fast(t, offsets, ids, n_ids, ttls) -> Distances | None:
    """The run kernel; None if the trace turns out not to be prefix-closed."""
    n = len(offsets) - 1
    live = np.zeros((len(ttls), n), dtype=np.int64)
    ok, R, r_req, r_first, r_len, r_src, r_d = _runs_kernel(
        t, offsets, ids, n_ids, np.asarray(ttls, dtype=np.int64), live)
    if not ok:
        return None
    req = r_req[:R].astype(np.int64)
    src = r_src[:R].astype(np.int64)
    return Distances(req=req, first=r_first[:R].astype(np.int64), blocks=r_len[:R].astype(np.int64),
                     d=r_d[:R].copy(), age=t[req] - t[src], unique=np.diff(offsets).astype(np.int64),
                     live={tau: live[k] for k, tau in enumerate(ttls)}, kernel="numba")


def run_blocks(t, offsets, ids, n_ids, ttls) -> Distances:
    """The block-by-block kernel: exact on any trace (single-block runs with ``d*`` and ``a*``)."""
    n, N = len(offsets) - 1, len(ids)
    live = np.zeros((len(ttls), n), dtype=np.int64)
    unique = np.zeros(n, dtype=np.int64)
    o_req = np.empty(N, dtype=np.int64)
    o_first = np.empty(N, dtype=np.int64)
    o_d = np.empty(N, dtype=np.int64)
    o_age = np.empty(N, dtype=np.int64)
    R = _blocks_kernel(t, offsets, ids, n_ids, np.asarray(ttls, dtype=np.int64), live, unique,
                       o_req, o_first, o_d, o_age)
    return Distances(req=o_req[:R], first=o_first[:R], blocks=np.ones(R, dtype=np.int64), d=o_d[:R],
                     age=o_age[:R], unique=unique, live={tau: live[k] for k, tau in enumerate(ttls)},
                     kernel="numba-blocks")
