"""``BlockTrace``: the one in-memory trace shape that reuse analytics and replay share.

A block trace is a list of requests in time order, each with a prompt of ``input_length`` tokens
cut into fixed-size blocks named by prefix-chained ``hash_ids`` (the Mooncake format: block *k*
of a request is identified by the whole prefix up to it, so "block seen" means "prefix seen").
Real block traces (Mooncake, Bailian) load straight into it; telemetry becomes one through
derived prefix chains (``kvtrace.analyze.chains``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class BlockTrace:
    """Requests as flat numpy arrays (CSR layout for the per-request block lists).

    Attributes:
        ts: request time, seconds (float64), non-decreasing.
        input_length: prompt tokens per request (int64).
        output_length: output tokens per request (int64).
        offsets: int64, length n+1; request i's blocks are ``hash_ids[offsets[i]:offsets[i+1]]``.
        hash_ids: int64 (or int32, kept as given) block ids, prefix-chained (head first).
        block_size: tokens per block.
        session: optional integer session / thread id per request (for reuse profiles).
        name: a label (trace file stem, warehouse name).
    """

    ts: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    offsets: np.ndarray
    hash_ids: np.ndarray
    block_size: int
    session: np.ndarray | None = None
    name: str = "trace"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ts = np.asarray(self.ts, dtype=np.float64)
        self.input_length = np.asarray(self.input_length, dtype=np.int64)
        self.output_length = np.asarray(self.output_length, dtype=np.int64)
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        ids = np.asarray(self.hash_ids)  # int32 ids stay int32: a fleet's ids are its largest array
        self.hash_ids = ids if ids.dtype in (np.int32, np.int64) else ids.astype(np.int64)
        n = len(self.ts)
        if len(self.offsets) != n + 1 or len(self.input_length) != n or len(self.output_length) != n:
            raise ValueError("BlockTrace arrays disagree in length")

    @property
    def n_requests(self) -> int:
        return len(self.ts)

    @property
    def n_blocks(self) -> int:
        return int(self.offsets[-1])

    def blocks(self, i: int) -> np.ndarray:
        return self.hash_ids[self.offsets[i] : self.offsets[i + 1]]

    def block_tokens(self) -> np.ndarray:
        """Tokens each block access carries: ``block_size``, except a request's last, partial block."""
        counts = np.diff(self.offsets)
        tok = np.full(self.n_blocks, self.block_size, dtype=np.int64)
        last = self.offsets[1:] - 1
        has = counts > 0
        rem = self.input_length[has] - (counts[has] - 1) * self.block_size
        tok[last[has]] = np.clip(rem, 0, self.block_size)
        return tok

    @classmethod
    def from_lists(cls, ts, input_length, output_length, hash_lists, block_size: int, **kw) -> "BlockTrace":
        lens = np.fromiter((len(h) for h in hash_lists), dtype=np.int64, count=len(hash_lists))
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        flat = np.fromiter((x for h in hash_lists for x in h), dtype=np.int64, count=int(offsets[-1]))
        return cls(np.asarray(ts, float), input_length, output_length, offsets, flat, block_size, **kw)
