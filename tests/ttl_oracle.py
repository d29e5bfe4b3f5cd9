"""The TTL what-if's oracle and its inputs (no tests here): ``oracle`` simulates the idle-TTL
semantics block by block with a dict (hits per request, and blocks held after each request);
``block_traces`` is a Hypothesis strategy of small block traces, prefix-chained or arbitrary, whose
block ids repeat; ``TTLS`` the TTLs the property tests sweep, from zero to none."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvtrace.analyze.blocktrace import BlockTrace


def oracle(trace: BlockTrace, tau: float | None, held_too: bool = True):
    """Direct simulation of the issue's semantics, block by block, with a dict."""
    t = np.rint(trace.ts * 1e6).astype(np.int64)
    tau_us = None if tau is None else int(round(tau * 1e6))
    last: dict[int, int] = {}
    hit_blocks, hit_tokens, held = [], [], []
    for i in range(trace.n_requests):
        ids = trace.blocks(i).tolist()
        run = 0
        for b in ids:
            if b in last and (tau_us is None or t[i] - last[b] <= tau_us):
                run += 1
            else:
                break
        hit_blocks.append(run)
        hit_tokens.append(min(int(trace.input_length[i]), run * trace.block_size))
        for b in ids:
            last[b] = t[i]
        if held_too:
            held.append(sum(1 for v in last.values() if tau_us is None or t[i] - v <= tau_us))
    return np.array(hit_blocks), np.array(hit_tokens), np.array(held)


@st.composite
def block_traces(draw, max_requests: int = 40):
    """Prefix-chained or arbitrary block traces, small id space so blocks repeat."""
    n = draw(st.integers(0, max_requests))
    B = draw(st.sampled_from([1, 4, 16]))
    gaps = draw(st.lists(st.integers(0, 400), min_size=n, max_size=n))
    ts = np.cumsum(gaps).astype(float) / draw(st.sampled_from([1, 10, 1000]))
    lists, lens = [], []
    for _ in range(n):
        ids = draw(st.lists(st.integers(0, 12), min_size=0, max_size=8))
        lists.append(ids)
        extra = draw(st.integers(0, B - 1)) if ids else 0
        lens.append(max(0, len(ids) * B - extra))
    out = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    return BlockTrace.from_lists(ts, lens, out, lists, B)


TTLS = [0.0, 1.0, 5.0, 30.0, 120.0, None]
