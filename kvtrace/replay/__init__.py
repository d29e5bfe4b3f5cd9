"""Replay: the capacity x TTL grid, tier hierarchies, TTFT, the model catalog and ``kvtrace size``.

``replay(trace, ...)`` is the entry point; it returns a :class:`ReplayResult`. The sampled replay
is ``kvtrace.replay.sample.sampled_replay`` (not imported here: it compiles kernels with numba,
which a replay of a small trace never needs).
"""

from __future__ import annotations

from kvtrace.replay.catalog import KVModel, catalog_names, load_model, resolve_model
from kvtrace.replay.engine import ReplayResult, default_capacities, replay
from kvtrace.replay.size import size_calc
from kvtrace.replay.tiers import TierSet, load_tiers, preset_names
from kvtrace.replay.ttft import TTFTConfig

__all__ = [
    "KVModel",
    "ReplayResult",
    "TTFTConfig",
    "TierSet",
    "catalog_names",
    "default_capacities",
    "load_model",
    "load_tiers",
    "preset_names",
    "replay",
    "resolve_model",
    "size_calc",
    "tiers_report",
    "dram_fill_time",
]


def tiers_report(
    trace,
    tiers: str | TierSet,
    model: str | KVModel | None = None,
    ttls=None,
    capacities=None,
    tier_ttl: float | None = None,
    ttft: TTFTConfig | None = None,
) -> dict:
    """The report's ``tiers`` section for a block trace (see ``ReplayResult.tiers_section``).

    Args:
        trace: the window's block trace.
        tiers: a preset name, a TOML path or a ``TierSet``.
        model: a catalog name (``"MiniMax-M2.7:fp8"`` for an FP8 cache), a config.json path or a ``KVModel``.
        ttls: grid TTLs in seconds (no-TTL and ``tier_ttl`` are always added).
        capacities: grid capacities in tokens (default: 64 log-spaced sizes and unlimited).
        tier_ttl: the hierarchy's idle TTL in seconds (default: none).
    """
    ts = load_tiers(tiers) if isinstance(tiers, str) else tiers
    m = resolve_model(model) if isinstance(model, str) else model
    asked = [*(ttls or []), *([tier_ttl] if tier_ttl is not None else [])]
    grid_ttls = list(dict.fromkeys([*asked, None])) if asked else None
    res = replay(
        trace,
        capacities=list(capacities) if capacities else None,
        ttls=grid_ttls,
        model=m,
        tiers=ts,
        tier_ttl=tier_ttl,
        ttft=ttft,
    )
    return res.tiers_section()


def dram_fill_time(
    trace,
    model: str | KVModel = "MiniMax-M2.7:fp8",
    tiers: str | TierSet = "seed-testbed",
    tier: str = "DRAM",
    tier_ttl: float | None = None,
) -> dict:
    """When a tier of a hierarchy first fills under a workload (the seed scenario's question).

    Returns:
        ``{"tier", "first_full_s", "capacity_bytes", "write_bytes_per_s_mean", ...}`` for ``tier``;
        ``first_full_s`` is None when it never fills within the trace.
    """
    ts = load_tiers(tiers) if isinstance(tiers, str) else tiers
    m = resolve_model(model) if isinstance(model, str) else model
    res = replay(trace, capacities=[None], ttls=[None], model=m, tiers=ts, tier_ttl=tier_ttl)
    for t in res.tiers["tiers"]:
        if t["name"].lower() == tier.lower():
            keep = (
                "name",
                "capacity_bytes",
                "capacity_tokens",
                "depth_tokens",
                "first_full_s",
                "fills_at",
                "write_bytes_per_s_mean",
                "write_bytes_per_s_peak",
                "hit_ratio_tokens",
            )
            return {k: t[k] for k in keep} | {
                "span_s": res.tiers["span_s"],
                "model": m.name,
                "kv_dtype": m.kv_dtype,
                "tiers": ts.name,
            }
    raise KeyError(f"no tier named {tier!r} in {ts.name}")
