"""Compiled loops for the two steps that are sequential by nature (numba, cached on disk).

Everything else in reuse analytics is vectorized numpy over *runs* of blocks; these two walk
blocks once each: linking every block access to the previous and next access of the same block,
and writing the block ids of derived prefix chains.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def link_accesses(ids, offsets, n_ids, prev, nxt, dup):  # pragma: no cover - compiled
    """For each block access: the request that touched the block before (``prev``, -1 if none)
    and after (``nxt``, -1 if none); ``dup`` marks a repeat of a block within one request.

    Args:
        ids: dense block ids in ``[0, n_ids)``, requests in time order (CSR by ``offsets``).
        prev, nxt: int arrays of ``len(ids)``, written in place.
        dup: bool array of ``len(ids)``, written in place.
    """
    n = len(offsets) - 1
    last = np.full(n_ids, -1, dtype=prev.dtype)
    before = np.full(n_ids, -1, dtype=prev.dtype)
    for i in range(n):
        for k in range(offsets[i], offsets[i + 1]):
            b = ids[k]
            p = last[b]
            if p == i:                      # seen earlier in this very request
                prev[k] = before[b]
                dup[k] = True
            else:
                before[b] = p
                prev[k] = p
                last[b] = i
                dup[k] = False
    last[:] = -1
    for i in range(n - 1, -1, -1):
        for k in range(offsets[i], offsets[i + 1]):
            nxt[k] = last[ids[k]]
        for k in range(offsets[i], offsets[i + 1]):
            last[ids[k]] = i


@numba.njit(cache=True, nogil=True)
def chain_ids(order, offsets, chain_prev, head_blocks, head_base, inherit, out):  # pragma: no cover
    """Write the block ids of derived prefix chains.

    Requests are visited in ``order`` (chain by chain, in time), so a request's chain predecessor
    is written before it. Request ``g``'s blocks ``[0, head_blocks[g])`` take the shared head ids
    ``head_base[g] + k``; blocks ``[head_blocks[g], inherit[g])`` copy the predecessor's ids; the
    rest get new ids, numbered after every head id.
    """
    fresh = 0
    for j in range(len(head_base)):
        if head_blocks[j] > 0 and head_base[j] + head_blocks[j] > fresh:
            fresh = head_base[j] + head_blocks[j]
    for t in range(len(order)):
        g = order[t]
        o = offsets[g]
        n = offsets[g + 1] - o
        h = min(head_blocks[g], n)
        for k in range(h):
            out[o + k] = head_base[g] + k
        p = chain_prev[g]
        upto = min(inherit[g], n)
        k = h
        if p >= 0:
            po = offsets[p]
            while k < upto:
                out[o + k] = out[po + k]
                k += 1
        while k < n:
            out[o + k] = fresh
            fresh += 1
            k += 1
