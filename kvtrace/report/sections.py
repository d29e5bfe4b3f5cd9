"""Optional report sections that call the reuse and replay analyses."""

from __future__ import annotations


def _trace(store, win):
    from kvtrace.analyze.chains import load_block_trace

    return load_block_trace(store, since=win["since"], until=win["until"])


def _bytes_per_token(model: str | None) -> float | None:
    if not model:
        return None
    from kvtrace.replay.catalog import resolve_model

    return resolve_model(model).bytes_per_token


def ttl_section(store, opts, win) -> list[dict] | None:
    """The ``ttl`` list: hit ratios and working set per TTL (unlimited capacity)."""
    from kvtrace.analyze.ttl import ttl_section as compute

    trace = _trace(store, win)
    if trace.n_requests == 0:
        return []
    return compute(trace, opts.ttls, bytes_per_token=_bytes_per_token(opts.model))


def tiers_section(store, opts, win) -> dict | None:
    """The ``tiers`` section: tier replay of the window's block trace."""
    from kvtrace.replay import tiers_report

    trace = _trace(store, win)
    if trace.n_requests == 0:
        return None
    return tiers_report(trace, tiers=opts.tiers, model=opts.model, ttls=opts.ttls, capacities=opts.capacities)
