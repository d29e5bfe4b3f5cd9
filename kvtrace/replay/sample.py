"""Spatially hashed sampling of block ids for the capacity grid and the tier replay (SHARDS).

SHARDS (Waldspurger et al., FAST'15) replays only the blocks whose id hashes below a threshold:
block ``x`` is sampled when ``hash(x) mod P < T`` (splitmix64's finalizer, top 32 bits, so
``P = 2**32``), which keeps every access of a sampled block and none of the others, at rate
``R = T / P``. Same trace, same sample: no random state.

**Heavy blocks are kept whole.** A prefix-chained trace has a few blocks nearly every request
starts with (the system prompt and tools): in the Mooncake conversation trace one block is 4% of
all accesses, in a fleet 4 blocks are 12%. Plain SHARDS either misses such a block (probability
``1 - R``) or weighs it ``1 / R``, and every cell of the grid moves with it: at 1% the error of
the conversation trace's grid is 0.038. So the blocks drawing more than ``HEAVY_WEIGHT x R`` of
the accesses (counted on evenly spaced accesses) are replayed with all their accesses and weight
1, the others sampled with weight ``1 / R``: a stratified sample, exact on the heavy stratum.

**Weighted LRU walk.** Depths count the blocks above a block weighted the same way (a sampled
block above stands for ``1 / R`` blocks, a heavy one for 1), so a depth is an estimate in blocks
of the full trace and the grid's capacities are the full trace's. Ages are exact (a kept block
keeps every access). Prefix semantics survive sampling: a block id always follows the same chain
of parents, so the sampled blocks before it are always the same and the sample is prefix-closed
too; each kept block carries the tokens it carried in its request.

**Estimates.** Per grid cell, hits of heavy blocks count as they are; hits of sampled blocks scale
to all the light accesses of the trace (known exactly: a ratio estimate per stratum). Tier
traffic counts a sampled block as ``1 / R`` blocks.

**Fixed size** (``Sampling(size=N)``): SHARDS' adaptive rate. Walking the trace in time order
with ``T = P``, the sampled blocks are kept in a set; when it exceeds ``N`` blocks, ``T`` falls to
the largest hash in the set and the blocks hashing at ``T`` or above leave it. The threshold it
ends with is the ``(N+1)``-th smallest distinct block hash, and kvtrace samples the whole trace at
that rate: what SHARDS' fixed-size run converges to, every access sampled at the one final rate
(a file can be read twice; a live stream could not). At most ``N`` distinct blocks are replayed,
heavy ones included.

**The expected error** stated with every sampled replay: ``k`` more samples of the same rate on
the disjoint hash ranges ``[pT, (p+1)T)`` (their light blocks only: the heavy ones are the same in
every sample) give ``k + 1`` estimates of every cell; the sampling noise is twice the mean (over
the cells) of their standard deviation. To it is added the depth resolution: the mean change of
the grid when every capacity grows by ``1 / R`` blocks (a sampled block's depth is known to that
much; it matters for caches of a few sampled blocks). Measured against the exact grid, the stated
error has stayed above the mean absolute error on every trace of ``bench/bench_sample.py``
(``docs/sampling.md``).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from kvtrace.analyze._kernels import first_seen_codes
from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.working_set import sizing_warnings
from kvtrace.errors import ConfigError
from kvtrace.replay.distances import NO_TTL, Distances, ts_us
from kvtrace.replay.engine import (
    ASSUMPTIONS,
    DEFAULT_TTLS,
    TIER_ASSUMPTIONS,
    ReplayResult,
    _ttl_us,
    default_capacities,
    grid_rows,
)
from kvtrace.replay.grid import hit_grid
from kvtrace.replay.kernel import _blocks_kernel, _fen_add, _fen_prefix, _keep_rows
from kvtrace.replay.tiers import resolve
from kvtrace.replay.traffic import band_hits, tier_traffic

HASH_BITS = 32
MODULUS = 1 << HASH_BITS  # P: hashes are the top 32 bits of a 64-bit mix
ERROR_PARTITIONS = 4  # extra disjoint samples for the per-run error estimate
ERROR_FACTOR = 2.0  # stated error = this x mean per-cell deviation across samples
SIZE_CHUNK = 1 << 22  # block accesses per step of the fixed-size threshold walk
HEAVY_PROBE = 1 << 22  # block accesses looked at (evenly spaced) to find heavy blocks
HEAVY_WEIGHT = 0.01  # heavy: a block that, sampled, would carry > 1% of the accesses
HEAVY_MAX = 1024  # at most this many heavy blocks (the heaviest)


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(x):  # pragma: no cover - compiled
    """splitmix64's finalizer of a 64-bit id, top 32 bits: a stable, well mixed hash."""
    z = np.uint64(x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z >> np.uint64(64 - HASH_BITS))


@numba.njit(cache=True, nogil=True)
def _hash_kernel(ids, out):  # pragma: no cover - compiled
    for k in range(len(ids)):
        out[k] = _mix(ids[k])


def block_hash(ids: np.ndarray) -> np.ndarray:
    """The sampling hash of each block id, in ``[0, 2**32)`` (int64)."""
    ids = np.ascontiguousarray(ids).astype(np.int64, copy=False)
    out = np.empty(len(ids), dtype=np.int64)
    _hash_kernel(ids, out)
    return out


HEAVY_CODE = 255  # sample codes: a heavy block, or no sample
NO_CODE = 254


@numba.njit(cache=True, nogil=True)
def _code_kernel(offsets, ids, T, parts, heavy, lo, hi, codes, acc, req):  # pragma: no cover - compiled
    """Requests ``[lo, hi)``: each block access's sample code, ``HEAVY_CODE`` for a heavy block
    (``heavy`` sorted), else the sample ``p < parts`` whose hash range ``[pT, (p+1)T)`` holds its
    hash, else ``NO_CODE``; and per sample its block accesses (``acc``) and the requests holding
    one (``req``). Heavy blocks belong to sample 0."""
    H = len(heavy)
    bloom = np.zeros(1 << 16, dtype=np.bool_)  # a heavy block's hash sets its low 16 bits here
    for k in range(H):
        bloom[_mix(heavy[k]) & 0xFFFF] = True
    seen = np.full(parts, -1, dtype=np.int64)  # the last request counted in each sample
    for i in range(lo, hi):
        for a in range(offsets[i], offsets[i + 1]):
            x = ids[a]
            h = _mix(x)
            c = NO_CODE
            if h < parts * T:
                c = h // T
            if bloom[h & 0xFFFF]:
                k = np.searchsorted(heavy, x)
                if k < H and heavy[k] == x:
                    c = HEAVY_CODE
            codes[a] = c
            if c != NO_CODE:
                p = 0 if c == HEAVY_CODE else c
                acc[p] += 1
                if seen[p] != i:
                    seen[p] = i
                    req[p] += 1


@numba.njit(cache=True, nogil=True)
def _route_kernel(offsets, ids, L, bs, codes, lo, hi, at_req, at_acc, r_idx, r_cnt, r_tok, out_ids):  # pragma: no cover
    """Requests ``[lo, hi)``: each coded block access to its sample (heavy ones to sample 0), at
    the sample's cursors ``at_acc`` (accesses) and ``at_req`` (requests); per request kept, its
    index, its kept blocks and the tokens they carried (a full block or the partial last one)."""
    seen = np.full(len(at_req), -1, dtype=np.int64)
    for i in range(lo, hi):
        a0 = offsets[i]
        for j in range(offsets[i + 1] - a0):
            c = codes[a0 + j]
            if c == NO_CODE:
                continue
            p = 0 if c == HEAVY_CODE else c
            if seen[p] != i:
                seen[p] = i
                r = at_req[p]
                at_req[p] += 1
                r_idx[r], r_cnt[r], r_tok[r] = i, 0, 0
            r = at_req[p] - 1
            out_ids[at_acc[p]] = ids[a0 + j]
            at_acc[p] += 1
            r_cnt[r] += 1
            r_tok[r] += min(max(L[i] - j * bs, 0), bs)


@numba.njit(cache=True, nogil=True)
def _stratum_sums(offsets, L, bs, ids, is_heavy):  # pragma: no cover - compiled
    """Block accesses and the tokens they carry, of heavy and of light blocks; distinct blocks."""
    nb_h = nt_h = nb_l = nt_l = 0
    seen = np.zeros(len(is_heavy), dtype=np.bool_)
    distinct = 0
    for i in range(len(offsets) - 1):
        a = offsets[i]
        for j in range(offsets[i + 1] - a):
            if not seen[ids[a + j]]:
                seen[ids[a + j]] = True
                distinct += 1
            tok = min(max(L[i] - j * bs, 0), bs)
            if is_heavy[ids[a + j]]:
                nb_h += 1
                nt_h += tok
            else:
                nb_l += 1
                nt_l += tok
    return nb_h, nt_h, nb_l, nt_l, distinct


@numba.njit(cache=True, nogil=True)
def _weighted_runs_kernel(
    t,
    offsets,
    ids,
    n_ids,
    wt,
    hv,
    unit,
    ttls,
    rows,
    live,
    peak,
    unique,
    b_src,
    b_first,
    b_len,
    b_w,
    o_req,
    o_first,
    o_len,
    o_d,
    o_age,
    o_heavy,
):  # pragma: no cover - compiled
    """``kernel._runs_kernel`` with weights: a Fenwick tree over requests holds each request's
    live weight; a run's first block lies below the live weight of later requests, and each block
    of the run below the ones before it. Writes segments of runs (a single light block, or
    consecutive blocks of one weight ``unit``, whose depths step by one) and returns their
    number, or -1 when the sample is not prefix-closed."""
    n = len(offsets) - 1
    last = np.full(n_ids, -1, dtype=np.int64)
    cut = np.zeros(n, dtype=np.int64)
    fen = np.zeros(n + 1, dtype=np.int64)
    lw = np.zeros(n, dtype=np.int64)  # live weight per request (fen holds the same, summable)
    total = 0
    T = len(ttls)
    ptr = np.zeros(T, dtype=np.int64)
    gone = np.zeros(T, dtype=np.int64)  # live weight of the requests before ptr[k]: expired
    S = 0
    b_age = np.empty(len(b_src), dtype=np.int64)
    for i in range(n):
        a = offsets[i]
        m = offsets[i + 1] - a
        nr = 0
        src = n
        j = 0
        uw = 0
        while j < m:
            x = ids[a + j]
            r = last[x]
            if r < 0:
                break
            ro = offsets[r]
            rl = offsets[r + 1] - ro
            if r >= src or cut[r] != j or j >= rl or ids[ro + j] != x:
                return -1
            if j > 0 and ids[ro + j - 1] != ids[a + j - 1]:
                return -1
            e = j + 1
            while e < m and e < rl and ids[a + e] == ids[ro + e]:
                e += 1
            ws = 0
            for k in range(j, e):
                ws += wt[ids[a + k]]
                last[ids[a + k]] = i
            b_src[nr] = r
            b_first[nr] = j
            b_len[nr] = e - j
            b_w[nr] = ws
            uw += ws
            nr += 1
            src = r
            j = e
        while j < m:  # the rest of the request must be new blocks
            x = ids[a + j]
            if last[x] >= 0:
                return -1
            last[x] = i
            uw += wt[x]
            j += 1
        for q in range(nr):  # depths against the stack before the request
            r = b_src[q]
            units = unit + total - _fen_prefix(fen, r)
            k = b_first[q]
            e = k + b_len[q]
            while k < e:
                x = ids[a + k]
                o_req[S] = i
                o_first[S] = k
                o_d[S] = (units + unit - 1) // unit
                o_age[S] = t[i] - t[r]
                o_heavy[S] = hv[x]
                ln = 0
                while k < e and hv[ids[a + k]] == hv[x] and wt[ids[a + k]] == unit and (ln == 0 or wt[x] == unit):
                    units += unit
                    k += 1
                    ln += 1
                if ln == 0:
                    units += wt[x]
                    k += 1
                    ln = 1
                o_len[S] = ln
                S += 1
        ti = t[i]
        for q in range(nr):  # the runs' ages, once for every TTL
            b_age[q] = ti - t[b_src[q]]
        for k in range(T):
            lim = ti - ttls[k]
            p = ptr[k]
            g = gone[k]
            while p < i and t[p] < lim:
                g += lw[p]
                p += 1
            ptr[k] = p
            gone[k] = g
            before = total - g
            if rows[k] >= 0:
                live[rows[k], i] = before / unit
            hit = 0
            tk = ttls[k]
            for q in range(nr):
                if b_age[q] <= tk:
                    hit += b_w[q]
            if before + uw - hit > peak[k]:
                peak[k] = before + uw - hit
        for q in range(nr):
            r = b_src[q]
            _fen_add(fen, r, -b_w[q])
            lw[r] -= b_w[q]
            for k in range(T):
                if r < ptr[k]:
                    gone[k] -= b_w[q]
            cut[r] += b_len[q]
            total -= b_w[q]
        _fen_add(fen, i, uw)
        lw[i] = uw
        total += uw
        unique[i] = uw / unit
    return S


@dataclass(frozen=True)
class Sampling:
    """How to sample: a fixed ``rate`` (0 < rate <= 1) or a fixed ``size`` (most distinct blocks)."""

    rate: float | None = None
    size: int | None = None
    partitions: int = ERROR_PARTITIONS
    heavy: bool = True  # keep the heaviest blocks whole (False: plain SHARDS)

    def __post_init__(self):
        if (self.rate is None) == (self.size is None):
            raise ConfigError(
                "sample either at a rate or to a size, not both", hint="e.g. --sample 1% or --sample-size 1M"
            )
        if self.rate is not None and not (0 < self.rate <= 1):
            raise ConfigError(f"sampling rate {self.rate:g} is not in (0, 1]", hint="e.g. --sample 1% or --sample 0.01")
        if self.size is not None and self.size < 1:
            raise ConfigError(f"sample size {self.size} is not positive", hint="e.g. --sample-size 1M (blocks)")


def parse_rate(text: str) -> float:
    """``"1%"`` or ``"0.01"`` -> 0.01 (a rate in (0, 1])."""
    s = text.strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise ConfigError(
            f"--sample {text!r} is not a rate", hint="give a percentage or a fraction: 1% or 0.01"
        ) from None
    if not (0 < v <= 1) or math.isnan(v):
        raise ConfigError(f"--sample {text!r} is not in (0, 100%]", hint="e.g. --sample 1% (or 0.01)")
    return v


def threshold_for_rate(rate: float) -> int:
    """``T`` of a fixed rate: ``round(rate x P)``, at least 1."""
    return max(1, min(MODULUS, int(round(rate * MODULUS))))


def threshold_for_size(ids: np.ndarray, size: int, chunk: int = SIZE_CHUNK) -> int:
    """SHARDS fixed-size: the threshold after walking ``ids`` in order, keeping at most ``size``
    distinct sampled blocks (lowering ``T`` to the largest kept hash whenever the set overflows).

    Memory: the kept set and one chunk. The answer does not depend on ``chunk``: it is the
    ``(size+1)``-th smallest distinct hash of the trace (or ``P`` when it has at most ``size``).
    """
    T = MODULUS
    kept = np.zeros(0, dtype=np.int64)
    kept_h = np.zeros(0, dtype=np.int64)
    for a in range(0, len(ids), chunk):
        part = np.asarray(ids[a : a + chunk], dtype=np.int64)
        h = block_hash(part)
        sel = h < T
        if not sel.any():
            continue
        kept, first = np.unique(np.concatenate([kept, part[sel]]), return_index=True)
        kept_h = np.concatenate([kept_h, h[sel]])[first]
        if len(kept) > size:
            T = int(np.partition(kept_h, size)[size])  # the (size+1)-th smallest hash
            keep = kept_h < T
            kept, kept_h = kept[keep], kept_h[keep]
    return T


def heavy_blocks(ids: np.ndarray, T: int) -> np.ndarray:
    """The blocks kept whole at threshold ``T`` (sorted): those drawing more than ``HEAVY_WEIGHT x
    rate`` of the block accesses, counted on at most ``HEAVY_PROBE`` evenly spaced accesses (and at
    least 4 times there). None at rate 1."""
    if T >= MODULUS or len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    probe = np.asarray(ids[:: max(1, len(ids) // HEAVY_PROBE)], dtype=np.int64)
    u, c = np.unique(probe, return_counts=True)
    sel = c >= max(4.0, HEAVY_WEIGHT * T / MODULUS * len(probe))
    u, c = u[sel], c[sel]
    if len(u) > HEAVY_MAX:  # the heaviest, ties broken by id
        u = u[np.lexsort((u, -c))[:HEAVY_MAX]]
    return np.sort(u)


@dataclass
class Split:
    """The samples of one trace (``split_samples``), held together: per sample, its requests
    (index, kept blocks, tokens) and block ids, in flat arrays cut at ``req_at``/``acc_at``."""

    trace: BlockTrace
    r_idx: np.ndarray
    r_cnt: np.ndarray
    r_tok: np.ndarray
    ids: np.ndarray
    req_at: np.ndarray  # sample p's requests are [req_at[p], req_at[p+1])
    acc_at: np.ndarray  # and its block accesses [acc_at[p], acc_at[p+1])

    def sample(self, p: int) -> tuple[BlockTrace, int]:
        """Sample ``p`` as a trace (sample 0 with the heavy blocks), and the tokens it carries.

        A request keeps its time; its input length becomes the tokens its sampled blocks carried
        (so each sampled block weighs what it did in the full trace). Requests left without a
        block are dropped, except the first and the last (the trace keeps its span)."""
        tr = self.trace
        r = slice(self.req_at[p], self.req_at[p + 1])
        idx, cnt, tok = self.r_idx[r], self.r_cnt[r], self.r_tok[r]
        n = tr.n_requests
        if n and (len(idx) == 0 or idx[0] != 0):
            idx, cnt, tok = np.r_[0, idx], np.r_[0, cnt], np.r_[0, tok]
        if n > 1 and idx[-1] != n - 1:
            idx, cnt, tok = np.r_[idx, n - 1], np.r_[cnt, 0], np.r_[tok, 0]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(cnt, out=offsets[1:])
        st = BlockTrace(
            tr.ts[idx],
            tok.astype(np.int64),
            tr.output_length[idx],
            offsets,
            self.ids[self.acc_at[p] : self.acc_at[p + 1]],
            tr.block_size,
            session=None if tr.session is None else tr.session[idx],
            name=tr.name,
        )
        return st, int(st.input_length.sum())


def split_samples(trace: BlockTrace, T: int, parts: int, heavy: np.ndarray, threads: int = 1) -> Split:
    """The ``parts`` samples of ``trace`` at threshold ``T`` (hash ranges ``[pT, (p+1)T)``), the
    heavy blocks in sample 0: two passes over the block accesses (hash and count, then route),
    each in ``threads`` pieces of whole requests at once (the result does not depend on it)."""
    parts = min(parts, NO_CODE)
    n, ids, offsets = trace.n_requests, trace.hash_ids, trace.offsets
    heavy = heavy.astype(ids.dtype)
    w = max(1, min(threads, len(ids) >> 20))
    inner = np.searchsorted(offsets, np.linspace(0, len(ids), w + 1)[1:-1], side="right") - 1
    cuts = np.unique(np.r_[0, inner, n]) if n else np.zeros(2, dtype=np.int64)
    w = len(cuts) - 1
    codes = np.empty(len(ids), dtype=np.uint8)
    acc, req = np.zeros((w, parts), dtype=np.int64), np.zeros((w, parts), dtype=np.int64)
    with ThreadPoolExecutor(max_workers=w) as pool:
        list(
            pool.map(
                lambda q: _code_kernel(offsets, ids, T, parts, heavy, cuts[q], cuts[q + 1], codes, acc[q], req[q]),
                range(w),
            )
        )
        # each piece writes each sample's requests and accesses after the pieces before it
        req_at, acc_at = (np.concatenate([[0], np.cumsum(x.sum(axis=0))]) for x in (req, acc))
        start_req = req_at[:-1] + np.cumsum(req, axis=0) - req
        start_acc = acc_at[:-1] + np.cumsum(acc, axis=0) - acc
        r_idx = np.empty(req_at[-1], dtype=np.int64)
        narrow = n == 0 or max(int(trace.input_length.max()), int(np.diff(offsets).max())) < 2**31
        r_cnt = np.empty(req_at[-1], dtype=np.int32 if narrow else np.int64)  # one request's blocks
        r_tok = np.empty(req_at[-1], dtype=np.int32 if narrow else np.int64)  # and the tokens they carry
        out = np.empty(acc_at[-1], dtype=ids.dtype)
        L, bs = trace.input_length, trace.block_size
        list(
            pool.map(
                lambda q: _route_kernel(
                    offsets,
                    ids,
                    L,
                    bs,
                    codes,
                    cuts[q],
                    cuts[q + 1],
                    start_req[q],
                    start_acc[q],
                    r_idx,
                    r_cnt,
                    r_tok,
                    out,
                ),
                range(w),
            )
        )
    return Split(trace, r_idx, r_cnt, r_tok, out, req_at, acc_at)


@dataclass
class SampledDistances:
    """The weighted walk of one sample: ``heavy`` and ``light`` (sampled) runs as
    :class:`Distances` with depths in blocks of the full trace, and the per-request and peak
    counts, weighted (a light block stands for ``1 / rate`` blocks)."""

    heavy: Distances
    light: Distances
    unique: np.ndarray
    live: dict
    peak_after: dict
    t_us: np.ndarray
    heavy_accesses: tuple[int, int]  # (block accesses, tokens) of heavy blocks: all of them
    light_accesses: tuple[int, int]  # (block accesses, tokens) of the sampled light blocks
    distinct: int  # distinct blocks in the sample


def sampled_distances(
    st: BlockTrace, heavy: np.ndarray, T: int, ttls_us: list[int], keep: list[int] = (), blocks: bool = False
) -> SampledDistances:
    """Depths (in blocks of the full trace) and ages of a sample's block accesses: by runs, or
    block by block when the sample is not prefix-closed (or ``blocks``, for checks). Peaks for
    every TTL of ``ttls_us``, live counts before each request for those of ``keep``."""
    t = ts_us(st)
    ttls = sorted({int(x) for x in ttls_us} | {NO_TTL})
    # ids numbered by first access: one pass, and the blocks of the sessions in flight get
    # nearby numbers (a walk's lookups stay in cache)
    ids, first = first_seen_codes(st.hash_ids)
    n_ids = len(first)
    is_heavy = np.isin(st.hash_ids[first], heavy) if len(heavy) else np.zeros(n_ids, dtype=bool)
    del first
    wt = np.where(is_heavy, T, MODULUS).astype(np.int64)  # in 1/T of a block of the full trace
    n, N = st.n_requests, st.n_blocks
    rows, keep = _keep_rows(ttls, keep)
    live = np.zeros((len(keep), n), dtype=np.float64)
    peak = np.zeros(len(ttls), dtype=np.int64)
    unique = np.zeros(n, dtype=np.float64)
    o_req, o_first, o_len, o_d, o_age = (np.empty(N, dtype=np.int64) for _ in range(5))
    o_heavy = np.empty(N, dtype=np.bool_)
    longest = int(np.diff(st.offsets).max()) if n else 0
    ttl_arr = np.asarray(ttls, dtype=np.int64)
    R = (
        -1
        if blocks
        else _weighted_runs_kernel(
            t,
            st.offsets,
            ids,
            n_ids,
            wt,
            is_heavy,
            T,
            ttl_arr,
            rows,
            live,
            peak,
            unique,
            *(np.empty(longest, dtype=np.int64) for _ in range(4)),
            o_req,
            o_first,
            o_len,
            o_d,
            o_age,
            o_heavy,
        )
    )
    if R < 0:  # not prefix-closed: block by block, the exact walk with the weights
        live[:], peak[:], unique[:] = 0, 0, 0
        R = _blocks_kernel(
            t,
            st.offsets,
            ids,
            n_ids,
            wt,
            T,
            np.int64,
            ttl_arr,
            rows,
            live,
            peak[:, None],
            unique,
            o_req,
            o_first,
            o_d,
            o_age,
            np.zeros(2, dtype=np.int64),
        )
        o_len[:R] = 1
        o_heavy[:R] = is_heavy[ids[st.offsets[o_req[:R]] + o_first[:R]]]
    nb_h, nt_h, nb_l, nt_l, distinct = _stratum_sums(st.offsets, st.input_length, st.block_size, ids, is_heavy)
    del ids  # the walk's numbering: not needed past here
    # heavy runs first, then light, each in walk order: one field at a time is copied, and the
    # two parts are slices of it (no second copy of every run)
    hv = o_heavy[:R]
    order = np.concatenate([np.flatnonzero(hv), np.flatnonzero(~hv)])
    n_heavy = int(hv.sum())
    del o_heavy, hv
    fields = {"req": o_req, "first": o_first, "blocks": o_len, "d": o_d, "age": o_age}
    del o_req, o_first, o_len, o_d, o_age
    for name in list(fields):  # each field's walk output is freed once copied
        fields[name] = fields.pop(name)[:R][order]
    del order

    def part(lo, hi):
        return Distances(
            **{name: arr[lo:hi] for name, arr in fields.items()}, unique=unique, kernel="numba-sampled", t_us=t
        )

    return SampledDistances(
        heavy=part(0, n_heavy),
        light=part(n_heavy, R),
        unique=unique,
        live={tau: live[k] for k, tau in enumerate(keep)},
        peak_after={tau: int(-(-int(peak[k]) // T)) for k, tau in enumerate(ttls)},
        t_us=t,
        heavy_accesses=(nb_h, nt_h),
        light_accesses=(nb_l, nt_l),
        distinct=distinct,
    )


def sampled_replay(
    trace: BlockTrace,
    sampling: Sampling,
    capacities: list[int | None] | None = None,
    ttls: list[float | None] | None = None,
    model=None,
    tiers=None,
    tier_ttl: float | None = None,
    release_ids: bool = False,
    threads: int | None = None,
):
    """The replay of ``kvtrace.replay.engine.replay`` estimated from a spatially hashed sample of
    ``trace`` (see the module docstring), in the full trace's units, with ``sample`` saying the
    rate and the expected error.

    The grid and the tier replay are estimated; the capacity-for-TTL table and TTFT are not (they
    need every request's blocks: replay without sampling for them). ``threads``: how many pieces
    the trace is split in at once, and how many samples (sample 0 and the error estimate's) walk
    at once (None: one per core); the result does not depend on it.
    """
    t0 = time.perf_counter()
    bs = trace.block_size
    caps_tok = list(capacities) if capacities else default_capacities(trace)
    if any(c is not None and c < 0 for c in caps_tok):
        raise ConfigError("a capacity is negative", hint="capacities are token counts such as 1M")
    ttl_list = list(ttls) if ttls else list(DEFAULT_TTLS)
    if any(x is not None and x < 0 for x in ttl_list):
        raise ConfigError("a TTL is negative", hint="TTLs are durations such as 5m")
    ids = trace.hash_ids
    T = threshold_for_rate(sampling.rate) if sampling.rate is not None else None
    if T is None:  # fixed size: the heavy blocks at that rate count against the size
        heavy = heavy_blocks(ids, threshold_for_size(ids, sampling.size))[: sampling.size // 2]
        T = threshold_for_size(ids, max(sampling.size - len(heavy), 1))
    else:
        heavy = heavy_blocks(ids, T)
    if not sampling.heavy:
        heavy = heavy[:0]
    rate = T / MODULUS
    k = min(sampling.partitions, MODULUS // T - 1, NO_CODE - 1)  # sample codes are bytes
    workers = threads or os.cpu_count() or 1
    split = split_samples(trace, T, k + 1, heavy, workers)
    L = trace.input_length
    total_t, total_b = max(int(L.sum()), 1), max(trace.n_blocks, 1)
    covered = int(np.minimum(L, np.diff(trace.offsets) * bs).sum())  # tokens the blocks carry
    finite = sorted({int(c) // bs for c in caps_tok if c is not None})
    caps = np.array(finite, dtype=np.int64)
    ttl_sorted = sorted({_ttl_us(x) for x in ttl_list})
    ttl_arr = np.array(ttl_sorted, dtype=np.int64)
    tau = _ttl_us(tier_ttl)
    resolved = resolve(tiers, model, bs) if tiers is not None else None
    bounds = None
    if resolved is not None:
        caps_t = np.array([r.capacity_blocks for r in resolved], dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum(caps_t) if tiers.mode == "exclusive" else caps_t])
    light_w = MODULUS / T  # a light block stands for 1 / rate blocks

    def walk(p: int) -> dict:
        """Sample ``p``'s walk and its hits, before weighting. Sample 0 holds the heavy blocks too;
        they are the same in every sample, so the others replay their light blocks only and keep
        just what ``weigh`` needs (their sample and walk are freed when they return)."""
        base = p == 0
        st, _ = split.sample(p)
        # the working set's peaks and live counts come from sample 0: the others skip them
        ttls_walk, keep = (sorted({*ttl_sorted, tau}), [tau] if resolved is not None else []) if base else ([], [])
        sd = sampled_distances(st, heavy if base else heavy[:0], T, ttls_walk, keep=keep)
        # sample 0 also needs the grid one light block (1 / rate blocks) larger: both in one pass
        # over its runs (a grid's rows at given capacities do not depend on the other rows)
        wider = base and T < MODULUS
        up = caps + -(-MODULUS // T)
        both = np.union1d(caps, up) if wider else caps
        rows = [np.r_[np.searchsorted(both, c), len(both)] for c in (caps, up)]  # + the unlimited row

        def grid(d):  # the grid at caps, and with ``wider`` the one at caps + 1 / rate blocks
            hb, ht = hit_grid(d, st.input_length, bs, both, ttl_arr)
            return [(hb[r], ht[r]) for r in rows] if wider else [(hb, ht)]

        light = grid(sd.light)
        out = {"light": light[0], "light_n": sd.light_accesses}
        if resolved is not None:
            out["band_light"] = band_hits(sd.light, st.input_length, bs, bounds, tau, st.n_requests)
        if base:
            heavy_g = grid(sd.heavy)
            out.update(st=st, sd=sd, heavy=heavy_g[0], heavy_n=sd.heavy_accesses)
            if wider:
                out["up"] = [heavy_g[1], light[1]]
            if resolved is not None:
                out["band_heavy"] = band_hits(sd.heavy, st.input_length, bs, bounds, tau, st.n_requests)
        elif resolved is not None:
            out["band_light"] = out["band_light"][1].sum(axis=1)  # the tier hit tokens are all it needs
        return out

    def weigh(g: dict, base: dict) -> dict:
        """A sample's grids (tokens, blocks) and tier hit ratios in the full trace's units: its
        light hits scale to the light accesses of the full trace (a ratio estimate per stratum),
        the heavy hits are sample 0's."""
        (hb_h, ht_h), (nb_h, nt_h) = base["heavy"], base["heavy_n"]
        (hb_l, ht_l), (nb_l, nt_l) = g["light"], g["light_n"]
        fb = (trace.n_blocks - nb_h) / nb_l if nb_l else 0.0
        ft = (covered - nt_h) / nt_l if nt_l else 0.0
        out = {"grid_t": (ht_h + ht_l * ft) / total_t, "grid_b": (hb_h + hb_l * fb) / total_b}
        if "up" in g:
            (ub_h, ut_h), (ub_l, ut_l) = g["up"]
            out["res_t"] = float(np.abs((ut_h + ut_l * ft) / total_t - out["grid_t"]).mean())
            out["res_b"] = float(np.abs((ub_h + ub_l * fb) / total_b - out["grid_b"]).mean())
        if resolved is not None:  # blocks weigh 1 / rate (as in the walk), hit tokens by ft
            hh, hl = base["band_heavy"], g["band_light"]
            if g is base:
                out["hits"] = (hh[0] + hl[0] * light_w, hh[1] + hl[1] * ft, hh[2] + hl[2] * light_w)
                hl = hl[1].sum(axis=1)
            out["tiers_t"] = (hh[1].sum(axis=1) + hl * ft) / total_t
        return out

    # The samples are independent and their kernels release the GIL: a thread per core (at most
    # one per sample), sample 0 first; each holds its sample while it runs. On an error, map
    # cancels the rest.
    with ThreadPoolExecutor(max_workers=max(1, min(k + 1, workers))) as pool:
        walks = list(pool.map(walk, range(k + 1)))
    split = None  # free the split (sample 0's ids, a view of it, keep its ids array alive)
    first = {**walks[0], **weigh(walks[0], walks[0])}
    st, sd, grid_t, grid_b = first["st"], first["sd"], first["grid_t"], first["grid_b"]
    if st.n_blocks == 0:
        raise ConfigError(
            f"{trace.name}: the sample at rate {rate:.3g} holds no block",
            hint="raise --sample (or --sample-size), or replay without sampling",
        )
    clock = {"sample_s": time.perf_counter() - t0}
    bpb = model.bytes_per_block(bs) if model is not None else None
    grid = grid_rows(
        caps_tok,
        ttl_list,
        finite,
        ttl_sorted,
        bs,
        bpb,
        lambda r, j: (
            float(grid_t[r, j]),
            float(grid_b[r, j]),
            int(round(grid_t[r, j] * total_t)),
            int(round(grid_b[r, j] * total_b)),
        ),
    )
    working = []
    for ttl in ttl_list:
        peak = sd.peak_after[_ttl_us(ttl)]
        working.append(
            {
                "ttl_s": None if _ttl_us(ttl) == NO_TTL else ttl,
                "peak_tokens": peak * bs,
                "peak_bytes": None if bpb is None else peak * bpb,
            }
        )
    hierarchy = None
    assumptions = list(ASSUMPTIONS)
    if tiers is not None:
        t2 = time.perf_counter()
        dist = Distances(
            req=sd.light.req,
            first=sd.light.first,
            blocks=sd.light.blocks,
            d=sd.light.d,
            age=sd.light.age,
            unique=sd.unique,
            live=sd.live,
            kernel="numba-sampled",
        )
        bpt = model.bytes_per_token if model is not None else 0
        per_tier, _, hit_t, info = tier_traffic(
            dist,
            sd.t_us,
            st.input_length,
            bs,
            resolved,
            tiers.mode,
            tau,
            bpt,
            hits=first["hits"],
            total_tokens=float(L.sum()),
        )
        hit_all = float(hit_t.sum())
        hierarchy = {
            "name": tiers.name,
            "description": tiers.description,
            "mode": tiers.mode,
            "ttl_s": None if tau == NO_TTL else float(tier_ttl),
            "window_s": info["window_s"],
            "span_s": info["span_s"],
            "hit_ratio_tokens": hit_all / total_t,
            "miss_tokens": int(L.sum()) - int(round(hit_all)),
            "tiers": per_tier,
        }
        assumptions.append(TIER_ASSUMPTIONS[tiers.mode])
        clock["tiers_s"] = time.perf_counter() - t2
    # The expected error: the spread of the grids of disjoint samples at the same rate (sampling
    # noise), plus how much the grid moves over one light block's depth (a light block stands for
    # 1 / rate blocks, so depths are known to that resolution).
    t3 = time.perf_counter()
    grids = [first, *(weigh(g, walks[0]) for g in walks[1:])]
    del walks
    err = err_b = err_tiers = 0.0 if T == MODULUS else None  # None: above 50%, no second sample fits
    if len(grids) > 1:

        def spread(key):
            return ERROR_FACTOR * float(np.std([g[key] for g in grids], axis=0, ddof=1).mean())

        err, err_b = spread("grid_t") + first["res_t"], spread("grid_b") + first["res_b"]
        err_tiers = spread("tiers_t") if resolved is not None else 0.0
    clock["error_s"] = time.perf_counter() - t3
    if release_ids:
        trace.hash_ids = np.zeros(0, dtype=np.int64)
    distinct = sd.distinct
    sample = {
        "mode": "rate" if sampling.rate is not None else "size",
        "rate": rate,
        "threshold": T,
        "modulus": MODULUS,
        "size_limit": sampling.size,
        "heavy_blocks": len(heavy),
        "sampled_blocks": distinct,
        "sampled_accesses": st.n_blocks,
        "block_accesses": trace.n_blocks,
        "samples": len(grids),
        "expected_error": err,
        "expected_error_blocks": err_b,
        "expected_error_tiers": err_tiers if resolved is not None else None,
        "error_basis": (
            f"{ERROR_FACTOR:g} x the mean over the grid's cells of the standard deviation of the "
            f"hit ratio across {len(grids)} disjoint samples at this rate, plus the mean change of "
            f"the grid when every capacity grows by 1/rate blocks"
            if len(grids) > 1
            else "every block is sampled: the replay is exact"
            if T == MODULUS
            else "not estimated above a 50% rate (no disjoint sample of the same rate fits in the hash "
            "range): sample at 50% or less for an estimate, or replay without sampling"
        ),
    }
    span = float(trace.ts[-1] - trace.ts[0]) if trace.n_requests else 0.0
    info_trace = {
        "name": trace.name,
        "requests": trace.n_requests,
        "blocks": trace.n_blocks,
        "block_size": bs,
        "input_tokens": int(L.sum()),
        "span_s": span,
        "distinct_blocks": sd.peak_after[NO_TTL],
    }
    warnings = [trace.meta["block_size_assumed"]] if trace.meta.get("block_size_assumed") else []
    # no steady-state check: it would need the exact working set the sample stands in for
    warnings += sizing_warnings(trace, ttl_list + ([tier_ttl] if tiers is not None else []), peaks={})
    if tiers is not None and model is not None:
        warnings.append("TTFT is not estimated from a sample (it is per request); replay without --sample for it.")
    if T < MODULUS:
        assumptions.append(
            f"Sampled (SHARDS): the blocks whose id hashes below {rate:.4g} of the hash range, and the "
            f"{len(heavy)} heaviest blocks whole; a sampled block stands for 1/{rate:.4g} blocks in depths "
            f"and counts. "
            + (
                f"Expected error of the hit ratios: {err:.2%} (mean absolute)."
                if err is not None
                else "Expected error not estimated above a 50% rate."
            )
        )
    clock["total_s"] = time.perf_counter() - t0
    return ReplayResult(
        trace=info_trace,
        grid=grid,
        working_set=working,
        model=None if model is None else model.to_dict(bs),
        tiers=hierarchy,
        ttft=None,
        engine={
            "kernel": "sampled",
            "runs": len(sd.heavy) + len(sd.light),
            **{key: round(v, 4) for key, v in clock.items()},
        },
        assumptions=assumptions,
        capacity=[],
        warnings=warnings,
        sample=sample,
    )
