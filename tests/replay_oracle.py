"""A slow, obviously correct LRU + idle-TTL simulator with prefix semantics: the replay oracle.

Each request looks its blocks up head first and stops at the first one that is missing or idle
for longer than the TTL; then it touches all its blocks at its time, tail first (so the head is
the most recently used), evicting least recently used blocks beyond the capacity.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


def simulate(trace, capacity_blocks: int | None, ttl_us: int | None):
    """Hit blocks and hit tokens of ``trace`` under LRU (``None`` = unlimited) and an idle TTL."""
    cache: OrderedDict = OrderedDict()          # block -> last access (µs); first = least recent
    t_us = np.rint(trace.ts * 1e6).astype(np.int64)
    hit_blocks = hit_tokens = 0
    for i in range(trace.n_requests):
        now = int(t_us[i])
        blocks = [int(b) for b in trace.blocks(i)]
        run = 0
        for b in blocks:
            if b in cache and (ttl_us is None or now - cache[b] <= ttl_us):
                run += 1
            else:
                break
        hit_blocks += run
        hit_tokens += min(int(trace.input_length[i]), run * trace.block_size)
        for b in reversed(blocks):
            cache[b] = now
            cache.move_to_end(b)
            while capacity_blocks is not None and len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return hit_blocks, hit_tokens


def per_request(trace, capacity_blocks: int | None, ttl_us: int | None):
    """Per request: (hit blocks, depth of each looked-up block before the request or None)."""
    stack: list = []                             # most recent first
    last: dict = {}
    t_us = np.rint(trace.ts * 1e6).astype(np.int64)
    out = []
    for i in range(trace.n_requests):
        now = int(t_us[i])
        blocks = [int(b) for b in trace.blocks(i)]
        run = 0
        for b in blocks:
            ok = b in last and (ttl_us is None or now - last[b] <= ttl_us)
            ok = ok and (capacity_blocks is None or stack.index(b) < capacity_blocks)
            if not ok:
                break
            run += 1
        out.append(run)
        for b in reversed(blocks):
            if b in last:
                stack.remove(b)
            stack.insert(0, b)
            last[b] = now
    return out
