"""A slow, obviously correct LRU + idle-TTL simulator with prefix semantics: the replay oracle.

Each request looks its blocks up head first and stops at the first one that is missing or idle
for longer than the TTL; then it touches all its blocks at its time, tail first (so the head is
the most recently used), evicting least recently used blocks beyond the capacity.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import strategies as st

from kvtrace.analyze.blocktrace import BlockTrace


BS = 4


def _trace(gaps_ms, hash_lists, extra):
    ts = np.cumsum(gaps_ms) / 1000.0
    lengths = [max(0, len(h) * BS - e) for h, e in zip(hash_lists, extra)]
    return BlockTrace.from_lists(ts, lengths, [1] * len(hash_lists), hash_lists, BS)


@st.composite
def any_trace(draw):
    """Arbitrary block lists: repeats within a request, shared ids at different depths."""
    n = draw(st.integers(1, 25))
    lists = [draw(st.lists(st.integers(0, 12), max_size=7)) for _ in range(n)]
    gaps = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(-3, 2 * BS), min_size=n, max_size=n))
    return _trace(gaps, lists, extra)


@st.composite
def prefix_trace(draw):
    """Prefix-closed traces (every block-hash format): each request extends a prefix of an
    earlier request (or starts fresh) with new ids."""
    n = draw(st.integers(1, 30))
    lists: list[list[int]] = []
    fresh = 0
    for _ in range(n):
        base: list[int] = []
        if lists and draw(st.booleans()):
            parent = lists[draw(st.integers(0, len(lists) - 1))]
            base = parent[: draw(st.integers(0, len(parent)))]
        new = draw(st.integers(0 if base else 1, 5))
        lists.append(base + list(range(fresh, fresh + new)))
        fresh += new
    gaps = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(-3, 2 * BS), min_size=n, max_size=n))
    return _trace(gaps, lists, extra)


def simulate(trace, capacity_blocks: int | None, ttl_us: int | None):
    """Hit blocks and hit tokens of ``trace`` under LRU (``None`` = unlimited) and an idle TTL."""
    cache: OrderedDict = OrderedDict()  # block -> last access (µs); first = least recent
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


def simulate_tiers(trace, caps: list[int], mode: str, ttl_us: int | None):
    """A tier hierarchy over one LRU stack, block by block, counting net movements per request.

    Exclusive: tier k holds stack positions (B[k-1], B[k]] with B the cumulative capacities;
    inclusive: tier k holds the top caps[k]. Expired blocks leave the stack before each lookup.

    Returns per request: hit blocks and hit tokens per tier, blocks written into each tier (and
    evicted from the last), and the blocks each tier holds afterwards.
    """
    K = len(caps)
    bounds = list(np.cumsum(caps)) if mode == "exclusive" else list(caps)
    top = bounds[-1]
    bs = trace.block_size
    t_us = np.rint(trace.ts * 1e6).astype(np.int64)
    stack: list = []  # most recent first
    last: dict = {}
    out = []

    def band(pos):  # 1-based position -> tier index, K = gone
        if pos is None:
            return K
        for k, b in enumerate(bounds):
            if pos <= b:
                return k
        return K

    for i in range(trace.n_requests):
        now = int(t_us[i])
        if ttl_us is not None:
            stack = [b for b in stack if now - last[b] <= ttl_us]
        before = {b: band(p + 1) for p, b in enumerate(stack)}
        blocks = [int(b) for b in trace.blocks(i)]
        L = int(trace.input_length[i])
        hb, ht = [0] * K, [0] * K
        for j, b in enumerate(blocks):
            if before.get(b, K) == K:
                break
            hb[before[b]] += 1
            ht[before[b]] += min(L, (j + 1) * bs) - min(L, j * bs)
        uniq = list(dict.fromkeys(blocks))
        stack = uniq + [b for b in stack if b not in set(uniq)]
        stack = stack[:top]
        for b in uniq:
            last[b] = now
        after = {b: band(p + 1) for p, b in enumerate(stack)}
        writes = [0] * (K + 1)
        if mode == "exclusive":
            writes[0] = sum(1 for b in uniq if before.get(b, K) != 0)
            for k in range(K):  # crossings of boundary k downward
                writes[k + 1] = sum(1 for b, bb in before.items() if bb <= k and after.get(b, K) > k)
        else:
            for k in range(K):
                writes[k] = sum(1 for b in uniq if before.get(b, K) > k)
            writes[K] = sum(1 for b in before if b not in after)
        occ = [
            sum(1 for v in after.values() if v == k) if mode == "exclusive" else min(len(stack), caps[k])
            for k in range(K)
        ]
        out.append((hb, ht, writes, occ))
    return out
