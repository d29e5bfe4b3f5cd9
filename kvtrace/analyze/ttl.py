"""TTL what-if with unlimited capacity and an idle TTL refreshed on every access.

The semantics every kvtrace test uses (and the replay engine's infinite-capacity column):

- a request's *hit run* is its longest leading run of blocks that are cached and not older
  than the TTL (an age equal to the TTL still hits);
- its hit tokens are ``min(input_length, run x block_size)``;
- afterwards all its blocks are touched at the request's time.

With runs (``kvtrace.analyze.access``) a run is a hit exactly when the running maximum of the
ages along its request is at most the TTL, so one sort of those maxima answers every TTL.
"""

from __future__ import annotations

import math

import numpy as np

from kvtrace.analyze.access import CHUNK_REQUESTS, WeightAtOrBelow, run_chunks, seconds_to_us
from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.spill import total
from kvtrace.analyze.working_set import working_sets


def _ttl_value(ttl: float | None) -> float | None:
    return None if ttl is None or ttl == math.inf else float(ttl)


def request_hits(trace: BlockTrace, ttl_s: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per request: hit blocks (the hit run) and hit tokens under one TTL."""
    tau = seconds_to_us(ttl_s)
    n = trace.n_requests
    blocks, tokens = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for c in run_chunks(trace):
        hit = c.times.eff_age <= tau
        at = c.runs.req - c.lo
        size = c.hi - c.lo
        blocks[c.lo : c.hi] = np.bincount(at, weights=c.runs.blocks * hit, minlength=size)
        tokens[c.lo : c.hi] = np.bincount(at, weights=c.runs.tokens * hit, minlength=size)
    return blocks, tokens


class _Hits:
    """Hit tokens and blocks per TTL, summed chunk by chunk (:meth:`add`)."""

    def __init__(self, ttls: list[float | None]) -> None:
        self.ttls = list(ttls)
        taus = np.array([seconds_to_us(t) for t in self.ttls], dtype=np.int64)
        self.order = np.argsort(taus, kind="stable")
        # a run hits under every TTL its effective age is at or below
        self.hits = WeightAtOrBelow(taus[self.order])

    def add(self, c) -> None:
        self.hits.add(c.times.eff_age, c.runs.tokens, c.runs.blocks)

    def result(self, trace: BlockTrace) -> list[dict]:
        total_tok = total(trace.input_length)
        total_blk = trace.n_blocks
        cum_tok, cum_blk = self.hits.at_or_below()
        rank = np.empty(len(self.order), dtype=np.int64)
        rank[self.order] = np.arange(len(self.order))
        out = []
        for j, ttl in enumerate(self.ttls):
            ht, hb = int(cum_tok[rank[j]]), int(cum_blk[rank[j]])
            out.append(
                {
                    "ttl_s": _ttl_value(ttl),
                    "hit_tokens": ht,
                    "hit_blocks": hb,
                    "hit_ratio_tokens": ht / total_tok if total_tok else 0.0,
                    "hit_ratio_blocks": hb / total_blk if total_blk else 0.0,
                }
            )
        return out


def hit_ratios(trace: BlockTrace, ttls: list[float | None], requests: int = CHUNK_REQUESTS) -> list[dict]:
    """Token- and block-weighted hit ratios for each TTL (None: no TTL).

    Returns:
        One dict per TTL, in the given order: ``ttl_s`` (None for no TTL), ``hit_tokens``,
        ``hit_blocks``, ``hit_ratio_tokens`` (of all prompt tokens) and ``hit_ratio_blocks``
        (of all block accesses).
    """
    hits = _Hits(ttls)
    for c in run_chunks(trace, requests):
        hits.add(c)
    return hits.result(trace)


def ttl_section(
    trace: BlockTrace,
    ttls: list[float | None],
    bytes_per_token: float | None = None,
    series: bool = False,
    requests: int = CHUNK_REQUESTS,
) -> list[dict]:
    """The report's ``ttl`` list: per TTL the hit ratios and the working set it requires.

    Args:
        trace: a block trace (ingested, or derived from telemetry by prefix chains).
        ttls: idle TTLs in seconds (None or ``inf``: no TTL).
        bytes_per_token: KV bytes per token for ``peak_bytes`` (None leaves it null).
        series: also give each working set its downsampled time series (for charts).
        requests: requests per chunk of the passes over the runs (the result does not depend on it).

    Returns:
        ``[{ttl_s, hit_ratio_tokens, hit_ratio_blocks,
        working_set: {mean_tokens, p99_tokens, peak_tokens, peak_bytes}}]``.
    """
    ttls = list(ttls)
    hits = _Hits(ttls)
    sets = working_sets(trace, ttls, bytes_per_token, 240 if series else 0, requests, each_chunk=hits.add)
    out = []
    for h, ws in zip(hits.result(trace), sets):
        entry = {
            "ttl_s": h["ttl_s"],
            "hit_ratio_tokens": h["hit_ratio_tokens"],
            "hit_ratio_blocks": h["hit_ratio_blocks"],
            "working_set": {
                "mean_tokens": ws["mean_tokens"],
                "p99_tokens": ws["p99_tokens"],
                "peak_tokens": ws["peak_tokens"],
                "peak_bytes": ws["peak_bytes"],
            },
        }
        if series:
            entry["working_set"]["series"] = ws["series"]
        out.append(entry)
    return out
