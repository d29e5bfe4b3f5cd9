"""Optional report sections that call the reuse and replay analyses."""

from __future__ import annotations

from datetime import datetime

from kvtrace.errors import ConfigError


def _trace(store, win, ids: bool = False):
    # Loaded once per report: every section of one build_report call shares the window dict.
    # Derived chains skip writing block ids (8 bytes per block: tens of GB at 10 M requests)
    # unless a section needs them (the tier replay); reuse, TTL and spend read access runs.
    if "_trace" not in win:
        from kvtrace.analyze.load import load_block_trace

        win["_trace"] = load_block_trace(store, since=win["since"], until=win["until"], materialize=False)
    if ids:
        from kvtrace.analyze.chains import materialize_ids

        materialize_ids(win["_trace"])
    return win["_trace"]


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
    return compute(trace, opts.ttls, bytes_per_token=_bytes_per_token(opts.model), series=True)


def warnings_section(store, opts, win) -> list[str] | None:
    """The ``warnings`` list: what the TTL and capacity figures rest on that may not hold (see
    ``kvtrace.analyze.working_set.sizing_warnings``)."""
    from kvtrace.analyze.working_set import sizing_warnings

    trace = _trace(store, win)
    return sizing_warnings(trace, opts.ttls) or None


def tiers_section(store, opts, win) -> dict | None:
    """The ``tiers`` section: tier replay of the window's block trace."""
    from kvtrace.replay import tiers_report
    from kvtrace.report.build import tier_ttl_s

    trace = _trace(store, win, ids=True)
    if trace.n_requests == 0:
        return None
    return tiers_report(
        trace, tiers=opts.tiers, model=opts.model, ttls=opts.ttls, capacities=opts.capacities, tier_ttl=tier_ttl_s(opts)
    )


# -- sections added for the HTML charts (reuse-time CDF, spend by TTL) ----------------------------


def reuse_section(store, opts, win) -> dict | None:
    """The ``reuse`` section: the reuse profile (reuse-time CDF, shares within 1 min / 5 min / 1 h,
    the TTL that captures 90/95/99% of reuse) of the window's block trace."""
    from kvtrace.analyze.reuse import reuse_profile

    trace = _trace(store, win)
    if trace.n_requests == 0:
        return None
    return reuse_profile(trace)


def spend_section(store, opts, win) -> dict | None:
    """The ``spend`` section: API spend under a 5 min and a 1 h TTL. Only for telemetry (derived
    traces carry each request's model; a block-hash trace has no model to price)."""
    from kvtrace.analyze.spend import load_pricing, spend_whatif

    trace = _trace(store, win)
    if trace.n_requests == 0 or "chain_prev" not in trace.meta:
        return None
    return spend_whatif(trace, load_pricing(opts.pricing))


def _bound_text(t) -> str | None:
    # the window bound as the warehouse query reads it: naive UTC, to the microsecond
    return t.isoformat() if isinstance(t, datetime) else t


# The longest window the simulate section runs (its series has a point a minute per configuration).
MAX_SIMULATED_S = 31 * 86400.0


def simulate_section(store, opts, win) -> dict | None:
    """The ``simulate`` section: ``kvtrace simulate``'s serving model (a ``kvtrace.simulate/1``
    dict) of the window's warehouse sessions, from its first request to 5 minutes after its last
    (``Recorded.span_s``), under each ``--simulate`` configuration; ``--model`` is the served
    model (default: kvtrace simulate's)."""
    from kvtrace.simulate.run import Scenario, parse_config, read_recorded, simulate

    since, until = _bound_text(win["since"]), _bound_text(win["until"])
    recorded = read_recorded(Scenario(sessions="warehouse", since=since, until=until), store)
    span = recorded.span_s() if recorded.rows else None
    if span is None:
        return None
    if span > MAX_SIMULATED_S:
        raise ConfigError(
            f"--simulate covers the report's window minute by minute: this one spans {span / 86400:.0f} days, "
            f"more than {MAX_SIMULATED_S / 86400:.0f}",
            hint="narrow the window with --since/--until (a stray old record can stretch a whole-warehouse window)",
        )
    sc = Scenario(
        sessions="warehouse",
        since=since,
        until=until,
        duration_s=span,
        configs=[parse_config(c, option="--simulate") for c in opts.simulate],
    )
    if opts.model:
        sc.model = opts.model
    return simulate(sc, store=store, recorded=recorded)
