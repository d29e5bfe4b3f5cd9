"""The capacity x TTL grid from one pass: exact hit counts for every (C, tau) at once.

A run (see :mod:`kvtrace.replay.distances`) of ``len`` blocks whose first block has depth ``d``
and age ``a`` contributes, at capacity ``C`` blocks and TTL ``tau``, ``clamp(C - d + 1, 0, len)``
hit blocks when ``a <= tau`` and nothing otherwise. Summed over runs that is a sum of ramps
``max(C - x, 0)``, so every capacity of a sorted grid is read from two cumulative sums per TTL:
``sum(C - x for x < C) = C * count(x < C) - sum(x for x < C)``. Tokens weigh each block of a
request of ``L`` input tokens by ``min(L, (k+1)B) - min(L, kB)``: full blocks are a ramp of slope
``B``, the one partial block a step.
"""

from __future__ import annotations

import numpy as np

from kvtrace.replay.distances import Distances


def run_token_split(dist: Distances, input_length: np.ndarray, block_size: int):
    """Per run: blocks carrying a full ``block_size`` tokens (a prefix of the run), and the
    tokens of the one partial block right after them (0 if none)."""
    L = input_length[dist.req]
    full = np.clip(L // block_size - dist.first, 0, dist.blocks)
    part = np.where(full < dist.blocks, np.clip(L - (dist.first + full) * block_size, 0, block_size), 0)
    return full, part


def _ramp_sums(x: np.ndarray, coef: np.ndarray | int, tb: np.ndarray, caps: np.ndarray, T: int) -> np.ndarray:
    """``out[t, k] = sum(coef * max(caps[k] - x, 0))`` over runs in TTL bin ``t`` (int64, exact:
    products may wrap around, the true result fits, and int64 arithmetic is modular)."""
    K = len(caps)
    b = np.searchsorted(caps, x, side="right")  # caps[k] > x  <=>  k >= b
    flat = tb * (K + 1) + b
    A = np.zeros((T + 1) * (K + 1), dtype=np.int64)
    S = np.zeros((T + 1) * (K + 1), dtype=np.int64)
    coef = np.broadcast_to(np.asarray(coef, dtype=np.int64), x.shape)
    np.add.at(A, flat, coef)
    np.add.at(S, flat, coef * x)
    A = A.reshape(T + 1, K + 1)[:T, :K].cumsum(axis=1)
    S = S.reshape(T + 1, K + 1)[:T, :K].cumsum(axis=1)
    with np.errstate(over="ignore"):
        return caps[None, :] * A - S


def _steps(y: np.ndarray, w: np.ndarray, tb: np.ndarray, caps: np.ndarray, T: int) -> np.ndarray:
    """``out[t, k] = sum(w * (caps[k] >= y))`` over runs in TTL bin ``t``."""
    K = len(caps)
    b = np.searchsorted(caps, y, side="left")  # caps[k] >= y  <=>  k >= b
    A = np.zeros((T + 1) * (K + 1), dtype=np.int64)
    np.add.at(A, tb * (K + 1) + b, w)
    return A.reshape(T + 1, K + 1)[:T, :K].cumsum(axis=1)


def hit_grid(
    dist: Distances,
    input_length: np.ndarray,
    block_size: int,
    caps_blocks: np.ndarray,
    ttls_us: np.ndarray,
    unlimited: bool = True,
):
    """Hit blocks and hit tokens for every capacity x TTL.

    Args:
        dist: runs from :func:`~kvtrace.replay.distances.compute_distances`.
        input_length: prompt tokens per request.
        block_size: tokens per block.
        caps_blocks: sorted, finite capacities in blocks.
        ttls_us: sorted TTLs in µs (a huge value for "no TTL").
        unlimited: also compute an unlimited-capacity row, appended last.

    Returns:
        ``(hit_blocks, hit_tokens)``, int64 arrays of shape ``(len(caps) [+1], len(ttls))``.
    """
    caps = np.asarray(caps_blocks, dtype=np.int64)
    ttls = np.asarray(ttls_us, dtype=np.int64)
    T, K = len(ttls), len(caps)
    if dist.kernel.startswith("numba"):  # the compiled twin (numba is loaded already)
        from kvtrace.replay.kernel import grid_sums

        A_b, S_b, A_t, S_t, W_t, ub, ut = grid_sums(dist, input_length, block_size, caps, ttls)
        with np.errstate(over="ignore"):
            blocks = caps[None, :] * A_b[:T, :K].cumsum(axis=1) - S_b[:T, :K].cumsum(axis=1)
            tokens = block_size * (caps[None, :] * A_t[:T, :K].cumsum(axis=1) - S_t[:T, :K].cumsum(axis=1))
        tokens += W_t[:T, :K].cumsum(axis=1)
        ub, ut = ub[:T], ut[:T]
    else:
        tb = np.searchsorted(ttls, dist.age, side="left")  # ttls[t] >= age  <=>  t >= tb
        keep = tb < T
        d, ln, tb = dist.d[keep], dist.blocks[keep], tb[keep]
        full, part = run_token_split(dist, input_length, block_size)
        full, part = full[keep], part[keep]
        x0 = d - 1
        one = np.ones_like(ln)
        blocks = _ramp_sums(
            np.concatenate([x0, x0 + ln]), np.concatenate([one, -one]), np.concatenate([tb, tb]), caps, T
        )
        tokens = block_size * _ramp_sums(
            np.concatenate([x0, x0 + full]), np.concatenate([one, -one]), np.concatenate([tb, tb]), caps, T
        )
        has = part > 0
        tokens += _steps(d[has] + full[has], part[has], tb[has], caps, T)
        ub = np.zeros(T, dtype=np.int64)
        ut = np.zeros(T, dtype=np.int64)
        np.add.at(ub, tb, ln)
        np.add.at(ut, tb, full * block_size + part)
    hb, ht = blocks.T.cumsum(axis=1), tokens.T.cumsum(axis=1)  # cumulative over TTL bins
    if unlimited:
        hb = np.vstack([hb, ub.cumsum()])
        ht = np.vstack([ht, ut.cumsum()])
    return hb, ht


def capacity_for_shares(
    dist: Distances,
    input_length: np.ndarray,
    block_size: int,
    ttls_us: np.ndarray,
    targets: np.ndarray,
    max_blocks: int,
    points: int = 64,
) -> np.ndarray:
    """The smallest LRU capacity (blocks) whose hit tokens reach ``targets[t, s]`` at TTL ``t``.

    Hit tokens grow with capacity (LRU's inclusion property holds under an idle TTL, which does
    not depend on capacity), so each answer is bracketed and the brackets shrink ``points``-fold
    per pass: every pass is one :func:`hit_grid` call over the union of the brackets' probe
    points, for every TTL at once. The answer is exact to the block.

    Args:
        dist, input_length, block_size: as for :func:`hit_grid`.
        ttls_us: sorted TTLs in µs (``NO_TTL`` for none).
        targets: hit tokens to reach, shape ``(len(ttls_us), S)``; each at most what an unlimited
            cache hits at that TTL.
        max_blocks: a capacity known to hit as much as an unlimited cache (the distinct blocks).

    Returns:
        int64 capacities in blocks, shape ``(len(ttls_us), S)``; 0 where the target is 0.
    """
    targets = np.asarray(targets, dtype=np.int64)
    lo = np.zeros(targets.shape, dtype=np.int64)  # hit(lo) < target (or target == 0)
    hi = np.full(targets.shape, max(int(max_blocks), 1), dtype=np.int64)  # hit(hi) >= target
    hi[targets <= 0] = 0
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            return hi
        probes = np.unique(
            np.concatenate(
                [lo[open_] + 1]
                + [np.linspace(a, b, points + 2).round().astype(np.int64) for a, b in zip(lo[open_], hi[open_])]
            )
        )
        probes = probes[probes > 0]
        _, ht = hit_grid(dist, input_length, block_size, probes, ttls_us, unlimited=False)
        for t, s in zip(*np.nonzero(open_)):
            inside = (probes > lo[t, s]) & (probes < hi[t, s])
            caps, hits = probes[inside], ht[inside, t]
            reach = np.flatnonzero(hits >= targets[t, s])
            if len(reach):  # caps holds lo + 1, so every open bracket shrinks
                hi[t, s] = caps[reach[0]]
                if reach[0] > 0:
                    lo[t, s] = caps[reach[0] - 1]
            else:
                lo[t, s] = caps[-1]
