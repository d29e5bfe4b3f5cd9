"""Helpers for the serving-model tests (no tests here): ``FixedCost``, a step cost every test can
check by hand (each step that runs anything takes the same time), and ``trace_of``, which turns
simulated turns back into the block trace the replay reads, so the two models can be compared on
the same requests."""

from __future__ import annotations

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.replay.catalog import resolve_model

MODEL = resolve_model("MiniMax-M2.7:fp8")


class FixedCost:
    """Every step that runs anything takes ``dt`` seconds (a hand-checkable step cost)."""

    def __init__(self, dt: float):
        self.dt, self.model = dt, MODEL

    def step(self, decode_seqs, decode_ctx, chunks):
        return self.dt if decode_seqs or chunks else 0.0

    def decode_steps(self, decode_seqs, decode_ctx, k):
        return np.full(k, self.dt)


def trace_of(turns, bs: int) -> BlockTrace:
    """The block trace of simulated turns: head blocks shared, chain blocks per chain; a partial last
    block is left out (the simulator, as vLLM and LMCache, caches whole blocks only)."""
    ids: dict = {}
    lists = []
    for t in turns:
        ch = t.chain
        split = ch.head.tokens // bs * bs if ch.head is not None else 0
        blocks = []
        for k in range(t.prompt // bs):
            if (k + 1) * bs <= split:
                key = ("head", ch.head.key, k)
            else:
                key = ("chain", id(ch), k)
            blocks.append(ids.setdefault(key, len(ids)))
        lists.append(blocks)
    return BlockTrace.from_lists(
        [t.issue_t for t in turns], [t.prompt for t in turns], [t.output for t in turns], lists, bs
    )
