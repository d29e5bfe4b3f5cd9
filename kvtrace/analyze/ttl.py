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

from kvtrace.analyze.access import seconds_to_us, times_for
from kvtrace.analyze.blocktrace import BlockTrace


def _ttl_value(ttl: float | None) -> float | None:
    return None if ttl is None or ttl == math.inf else float(ttl)


def request_hits(trace: BlockTrace, ttl_s: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per request: hit blocks (the hit run) and hit tokens under one TTL."""
    runs, rt = times_for(trace)
    tau = seconds_to_us(ttl_s)
    hit = rt.eff_age <= tau
    n = trace.n_requests
    blocks = np.bincount(runs.req, weights=runs.blocks * hit, minlength=n).astype(np.int64)
    tokens = np.bincount(runs.req, weights=runs.tokens * hit, minlength=n).astype(np.int64)
    return blocks, tokens


def hit_ratios(trace: BlockTrace, ttls: list[float | None]) -> list[dict]:
    """Token- and block-weighted hit ratios for each TTL (None: no TTL).

    Returns:
        One dict per TTL, in the given order: ``ttl_s`` (None for no TTL), ``hit_tokens``,
        ``hit_blocks``, ``hit_ratio_tokens`` (of all prompt tokens) and ``hit_ratio_blocks``
        (of all block accesses).
    """
    runs, rt = times_for(trace)
    total_tok = int(trace.input_length.sum())
    total_blk = trace.n_blocks
    ttls = list(ttls)
    if len(ttls) <= 16:
        # A few TTLs: one pass over the runs each beats sorting them.
        def counts(tau_us):
            hit = rt.eff_age <= tau_us
            return int(runs.tokens[hit].sum()), int(runs.blocks[hit].sum())
    else:
        order = np.argsort(rt.eff_age, kind="stable")
        ages = rt.eff_age[order]
        cum_tok = np.concatenate(([0], np.cumsum(runs.tokens[order])))
        cum_blk = np.concatenate(([0], np.cumsum(runs.blocks[order])))

        def counts(tau_us):
            k = int(np.searchsorted(ages, tau_us, side="right"))
            return int(cum_tok[k]), int(cum_blk[k])

    out = []
    for ttl in ttls:
        ht, hb = counts(seconds_to_us(ttl))
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


def ttl_section(
    trace: BlockTrace, ttls: list[float | None], bytes_per_token: float | None = None, series: bool = False
) -> list[dict]:
    """The report's ``ttl`` list: per TTL the hit ratios and the working set it requires.

    Args:
        trace: a block trace (ingested, or derived from telemetry by prefix chains).
        ttls: idle TTLs in seconds (None or ``inf``: no TTL).
        bytes_per_token: KV bytes per token for ``peak_bytes`` (None leaves it null).
        series: also give each working set its downsampled time series (for charts).

    Returns:
        ``[{ttl_s, hit_ratio_tokens, hit_ratio_blocks,
        working_set: {mean_tokens, p99_tokens, peak_tokens, peak_bytes}}]``.
    """
    from kvtrace.analyze.working_set import working_set

    out = []
    for h in hit_ratios(trace, list(ttls)):
        ws = working_set(trace, h["ttl_s"], bytes_per_token, series_points=240 if series else 0)
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
