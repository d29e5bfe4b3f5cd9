"""``replay()``: one pass over a block trace -> capacity x TTL grid, tiers, TTFT (a result object).

The library entry point of ``kvtrace replay``. It never prints; :class:`ReplayResult.to_dict`
is what the JSON output and the report layer render.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.working_set import sizing_warnings
from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import KVModel
from kvtrace.replay.distances import NO_TTL, compute_distances
from kvtrace.replay.grid import capacity_for_shares, hit_grid
from kvtrace.replay.tiers import TierSet, resolve
from kvtrace.replay.traffic import tier_traffic
from kvtrace.replay.ttft import TTFTConfig, ttft_report

DEFAULT_TTLS = (30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, None)
DEFAULT_POINTS = 64
CEILING_SHARES = (0.9, 0.99, 1.0)  # capacity reaching these shares of what each TTL allows

ASSUMPTIONS = [
    "LRU eviction with an idle TTL refreshed on every access; an age equal to the TTL still hits.",
    "Prefix semantics: a request's hit run stops at its first missing or expired block; "
    "hit tokens = min(input_length, run x block_size).",
    "After its lookup a request touches all its blocks at its time, tail first (the head is most recent).",
    "Capacities hold whole blocks: C tokens = floor(C / block_size) blocks; bytes via the model's bytes per block.",
]
TIER_ASSUMPTIONS = {
    "exclusive": "Tiers are depth bands of one LRU stack (exclusive, demote on evict): a hit is read from its "
    "band's tier and promoted to the first; each block brought up across a boundary pushes one "
    "block down across it (a write into the tier below).",
    "inclusive": "Tiers are write-through (inclusive, LMCache / Dynamo KVBM style): each tier holds the top of "
    "the LRU stack up to its size; every block a tier lacks is written to it.",
}


def default_capacities(trace: BlockTrace, points: int = DEFAULT_POINTS) -> list[int | None]:
    """``points`` log-spaced capacities (tokens, whole blocks) up to the trace's block accesses,
    from a size worth asking about (at most 64 blocks, at least 1/1000 of the top), and unlimited."""
    bs = trace.block_size
    top = max(trace.n_blocks, 2)
    lo = max(1, min(64, top // 1000))
    k = points
    grid = np.unique(np.round(np.geomspace(lo, top, k)).astype(np.int64))
    while len(grid) < min(points, top - lo + 1) and k < 4 * points:  # rounding merges small sizes
        k += 1
        grid = np.unique(np.round(np.geomspace(lo, top, k)).astype(np.int64))
    return [int(b) * bs for b in grid] + [None]


@dataclass
class ReplayResult:
    """Everything one replay computed (see ``to_dict`` for the JSON shape)."""

    trace: dict
    grid: list[dict]
    working_set: list[dict]
    model: dict | None = None
    tiers: dict | None = None
    ttft: dict | None = None
    engine: dict = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    capacity: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the figures rest on that may not hold
    sample: dict | None = None  # a sampled replay's rate and expected error (kvtrace.replay.sample)

    def to_dict(self) -> dict:
        """The JSON of ``kvtrace replay --format json``: ``grid`` and ``tiers`` are lists; the
        hierarchy's own figures (mode, TTL, overall hit ratio) are under ``hierarchy``."""
        tiers = dict(self.tiers or {})
        per_tier = tiers.pop("tiers", [])
        return {
            "trace": self.trace,
            "model": self.model,
            "grid": self.grid,
            "working_set": self.working_set,
            "capacity": self.capacity,
            "hierarchy": tiers or None,
            "tiers": per_tier,
            "ttft": self.ttft,
            "engine": self.engine,
            "assumptions": self.assumptions,
            "warnings": self.warnings,
            "sample": self.sample,
        }

    def tiers_section(self) -> dict:
        """The report's ``tiers`` section: the tier replay with the grid, TTFT and assumptions."""
        return {
            **(self.tiers or {}),
            "grid": self.grid,
            "capacity": self.capacity,
            "ttft": self.ttft,
            "working_set": self.working_set,
            "model": self.model,
            "engine": self.engine,
            "assumptions": self.assumptions,
            "warnings": self.warnings,
            **({"sample": self.sample} if self.sample is not None else {}),
        }

    def hit_ratio(self, capacity_tokens: int | None, ttl_s: float | None, weight: str = "tokens") -> float:
        """The grid value at one point (``None`` = unlimited / no TTL)."""
        for g in self.grid:
            if g["capacity_tokens"] == capacity_tokens and g["ttl_s"] == ttl_s:
                return g[f"hit_ratio_{weight}"]
        raise KeyError((capacity_tokens, ttl_s))

    def first_full_s(self, tier: str) -> float | None:
        """Seconds from the trace's start until ``tier`` first filled (None: it never did)."""
        for t in (self.tiers or {}).get("tiers", []):
            if t["name"].lower() == tier.lower():
                return t["first_full_s"]
        raise KeyError(tier)


def capacity_by_ttl(
    dist,
    trace: BlockTrace,
    ttl_list: list,
    ttl_sorted: list[int],
    ceiling: np.ndarray,
    bpb: int | None,
    tiers: list[dict],
) -> list[dict]:
    """Per TTL: the hit ratio it allows (unlimited capacity), the smallest LRU capacity reaching
    90%, 99% and 100% of it, and where each tier of the hierarchy ends (its depth in the LRU
    stack) on that curve.

    Args:
        ceiling: hit tokens of an unlimited cache per TTL of ``ttl_sorted``.
        tiers: the tier replay's per-tier entries (``depth_tokens``), or none.
    """
    bs = trace.block_size
    total_t = max(int(trace.input_length.sum()), 1)
    ttls_arr = np.array(ttl_sorted, dtype=np.int64)
    shares = np.array(CEILING_SHARES)
    targets = np.ceil(ceiling[:, None] * shares[None, :] - 1e-9).astype(np.int64)
    caps = capacity_for_shares(dist, trace.input_length, bs, ttls_arr, targets, max(trace.n_blocks, 1))
    depths = np.array(
        sorted({int(t["depth_tokens"]) // bs for t in tiers} | set(caps.ravel().tolist()) - {0}), dtype=np.int64
    )
    _, at = hit_grid(dist, trace.input_length, bs, depths, ttls_arr, unlimited=False) if len(depths) else (None, None)

    def hits(blocks: int, j: int) -> int:
        return 0 if blocks == 0 else int(at[np.searchsorted(depths, blocks), j])

    out = []
    for ttl in ttl_list:
        j = ttl_sorted.index(_ttl_us(ttl))
        top = int(ceiling[j])
        reach = [
            {
                "share": float(sh),
                "capacity_blocks": int(caps[j, i]),
                "capacity_tokens": int(caps[j, i]) * bs,
                "capacity_bytes": None if bpb is None else int(caps[j, i]) * bpb,
                "hit_ratio_tokens": hits(int(caps[j, i]), j) / total_t,
            }
            for i, sh in enumerate(CEILING_SHARES)
        ]
        landing = []
        for t in tiers:
            b = int(t["depth_tokens"]) // bs
            h = hits(b, j)
            landing.append(
                {
                    "name": t["name"],
                    "depth_tokens": b * bs,
                    "depth_bytes": None if bpb is None else b * bpb,
                    "hit_ratio_tokens": h / total_t,
                    "share_of_ceiling": h / top if top else None,
                }
            )
        out.append(
            {
                "ttl_s": None if ttl is None or math.isinf(ttl) else float(ttl),
                "hit_ratio_tokens": top / total_t,
                "reach": reach,
                "tiers": landing,
            }
        )
    return out


def _ttl_us(ttl: float | None) -> int:
    return NO_TTL if ttl is None or math.isinf(ttl) else int(round(ttl * 1e6))


class _Steps:
    """A replay's progress as a fraction of its expected work: each step has a share of it (its
    usual share of the time on a large trace), and the distances step reports within itself."""

    SHARES = {"distances": 0.57, "grid": 0.04, "tiers": 0.24, "ttft": 0.15, "capacity": 0.02}

    def __init__(self, progress, tiers: bool, ttft: bool) -> None:
        self.progress, self.done = progress, 0.0
        names = [n for n in self.SHARES if (n != "tiers" or tiers) and (n != "ttft" or ttft)]
        total = sum(self.SHARES[n] for n in names)
        self.start, acc = {}, 0.0
        for n in names:
            self.start[n] = acc / total
            acc += self.SHARES[n]
        self.start["done"] = 1.0
        self.width = {n: self.SHARES[n] / total for n in names}

    def at(self, step: str, fraction: float = 0.0) -> None:
        if self.progress is not None:
            # never backwards (a kernel that finds the trace not prefix-closed starts again)
            self.done = max(self.done, self.start[step] + self.width.get(step, 0.0) * fraction)
            self.progress(self.done, step)

    def within(self, step: str):
        return lambda fraction: self.at(step, fraction)


def grid_rows(caps_tok, ttl_list, finite, ttl_sorted, bs: int, bpb, cell) -> list[dict]:
    """The grid's rows, TTL by TTL and capacity by capacity as asked. ``cell(k, j)`` gives
    ``(hit_ratio_tokens, hit_ratio_blocks, hit_tokens, hit_blocks)`` of capacity ``finite[k]``
    (``k == len(finite)``: unlimited) and TTL ``ttl_sorted[j]``."""
    grid = []
    for ttl in ttl_list:
        j = ttl_sorted.index(_ttl_us(ttl))
        for c in caps_tok:
            k = len(finite) if c is None else finite.index(int(c) // bs)
            blocks = None if c is None else int(c) // bs
            ratio_t, ratio_b, hit_t, hit_b = cell(k, j)
            grid.append(
                {
                    "capacity_tokens": None if c is None else int(c),
                    "capacity_blocks": blocks,
                    "capacity_bytes": None if c is None or bpb is None else blocks * bpb,
                    "ttl_s": None if ttl is None or math.isinf(ttl) else float(ttl),
                    "hit_ratio_tokens": ratio_t,
                    "hit_ratio_blocks": ratio_b,
                    "hit_tokens": hit_t,
                    "hit_blocks": hit_b,
                }
            )
    return grid


def replay(
    trace: BlockTrace,
    capacities: list[int | None] | None = None,
    ttls: list[float | None] | None = None,
    model: KVModel | None = None,
    tiers: TierSet | None = None,
    tier_ttl: float | None = None,
    ttft: TTFTConfig | None = None,
    engine: str = "auto",
    points: int = 480,
    release_ids: bool = False,
    progress=None,
) -> ReplayResult:
    """Replay a block trace through LRU caches of every capacity x TTL, and through a tier hierarchy.

    Args:
        trace: requests in time order.
        capacities: cache sizes in tokens (``None`` = unlimited); default: 64 log-spaced sizes.
        ttls: idle TTLs in seconds (``None`` = no TTL); default: 30 s .. 2 h and none.
        model: KV geometry, for bytes (and needed by tiers sized in bytes and by TTFT).
        tiers: a hierarchy to replay through (at ``tier_ttl``).
        tier_ttl: the idle TTL of the hierarchy, seconds (None: no TTL).
        ttft: TTFT model options (computed when ``tiers`` and ``model`` are given).
        engine: ``auto``, ``numpy``, ``numba`` or ``blocks`` (see ``compute_distances``).
        points: at most this many time buckets in the tier time series.
        release_ids: drop ``trace.hash_ids`` once the distances are known (for a caller that
            loaded the trace only to replay it: frees the largest array early).
        progress: called as ``progress(fraction, step)`` as the replay advances (see ``_Steps``).
    """
    steps = _Steps(progress, tiers is not None, tiers is not None and model is not None)
    steps.at("distances")
    clock = {}
    t0 = time.perf_counter()
    caps_tok = list(capacities) if capacities else default_capacities(trace)
    if any(c is not None and c < 0 for c in caps_tok):
        raise ConfigError("a capacity is negative", hint="capacities are token counts such as 1M")
    ttl_list = list(ttls) if ttls else list(DEFAULT_TTLS)
    if any(t is not None and t < 0 for t in ttl_list):
        raise ConfigError("a TTL is negative", hint="TTLs are durations such as 5m")
    bs = trace.block_size
    need = {_ttl_us(t) for t in ttl_list} | {_ttl_us(tier_ttl)}
    keep = {_ttl_us(tier_ttl)} if tiers is not None else set()
    dist = compute_distances(
        trace, sorted(need), engine=engine, keep=keep, on_progress=steps.within("distances") if progress else None
    )
    if release_ids:
        trace.hash_ids = np.zeros(0, dtype=np.int64)  # the caller's copy, no longer needed
    clock["distances_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    steps.at("grid")
    finite = sorted({int(c) // bs for c in caps_tok if c is not None})
    ttl_sorted = sorted({_ttl_us(t) for t in ttl_list})
    hb, ht = hit_grid(
        dist, trace.input_length, bs, np.array(finite, dtype=np.int64), np.array(ttl_sorted, dtype=np.int64)
    )
    total_b, total_t = max(trace.n_blocks, 1), max(int(trace.input_length.sum()), 1)
    bpb = model.bytes_per_block(bs) if model is not None else None
    grid = grid_rows(
        caps_tok,
        ttl_list,
        finite,
        ttl_sorted,
        bs,
        bpb,
        lambda k, j: (int(ht[k, j]) / total_t, int(hb[k, j]) / total_b, int(ht[k, j]), int(hb[k, j])),
    )
    working = []
    for ttl in ttl_list:
        tau = _ttl_us(ttl)
        peak = dist.peak_after[tau]
        working.append(
            {
                "ttl_s": None if tau == NO_TTL else ttl,
                "peak_tokens": peak * bs,
                "peak_bytes": None if bpb is None else peak * bpb,
            }
        )
    clock["grid_s"] = time.perf_counter() - t1

    tier_out = ttft_out = None
    assumptions = list(ASSUMPTIONS)
    if dist.kernel == "numba-blocks":
        assumptions.append(
            "The trace is not prefix-closed (a block id follows different parents), so the "
            "block-by-block engine ran; hits are exact, tier traffic uses running maxima of depth."
        )
    if tiers is not None:
        t2 = time.perf_counter()
        steps.at("tiers")
        resolved = resolve(tiers, model, bs)
        t_us = dist.t_us
        tau = _ttl_us(tier_ttl)
        bpt = model.bytes_per_token if model is not None else 0
        per_tier, hit_b, hit_t, info = tier_traffic(
            dist, t_us, trace.input_length, bs, resolved, tiers.mode, tau, bpt, points=points
        )
        hit_all = int(hit_t.sum())
        tier_out = {
            "name": tiers.name,
            "description": tiers.description,
            "mode": tiers.mode,
            "ttl_s": None if tau == NO_TTL else float(tier_ttl),
            "window_s": info["window_s"],
            "span_s": info["span_s"],
            "hit_ratio_tokens": hit_all / total_t,
            "miss_tokens": int(trace.input_length.sum()) - hit_all,
            "tiers": per_tier,
        }
        assumptions.append(TIER_ASSUMPTIONS[tiers.mode])
        clock["tiers_s"] = time.perf_counter() - t2
        if model is not None:
            t3 = time.perf_counter()
            steps.at("ttft")
            ttft_out = ttft_report(
                t_us,
                trace.input_length,
                trace.session,
                dist,
                hit_b,
                hit_t,
                resolved,
                model,
                tiers.compute,
                ttft or TTFTConfig(),
                bs,
            )
            assumptions.append(
                "TTFT = reload of hit bytes at each tier's read bandwidth (+ latency) and "
                "re-prefill of missed tokens, overlapped or summed; no queueing."
            )
            clock["ttft_s"] = time.perf_counter() - t3
    t4 = time.perf_counter()
    steps.at("capacity")
    capacity = capacity_by_ttl(
        dist, trace, ttl_list, ttl_sorted, ht[len(finite)], bpb, (tier_out or {}).get("tiers") or []
    )
    clock["capacity_s"] = time.perf_counter() - t4
    span = float(trace.ts[-1] - trace.ts[0]) if trace.n_requests else 0.0
    info_trace = {
        "name": trace.name,
        "requests": trace.n_requests,
        "blocks": trace.n_blocks,
        "block_size": bs,
        "input_tokens": int(trace.input_length.sum()),
        "span_s": span,
        "distinct_blocks": dist.peak_after[NO_TTL],
    }
    clock["total_s"] = time.perf_counter() - t0
    steps.at("done")
    warnings = [trace.meta["block_size_assumed"]] if trace.meta.get("block_size_assumed") else []
    warnings += sizing_warnings(trace, ttl_list + ([tier_ttl] if tiers is not None else []), peaks=dist.peak_by_time)
    return ReplayResult(
        trace=info_trace,
        grid=grid,
        working_set=working,
        capacity=capacity,
        model=None if model is None else model.to_dict(bs),
        tiers=tier_out,
        ttft=ttft_out,
        engine={"kernel": dist.kernel, "runs": len(dist), **{k: round(v, 4) for k, v in clock.items()}},
        assumptions=assumptions,
        warnings=warnings,
    )
