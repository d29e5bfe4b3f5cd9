"""Token classes: totals, shares and the token-weighted cache hit ratio, overall and per group.

Shares are token-weighted (never per call). The hit ratio is
``cache_read / (cache_read + cache_write + uncached input)``: the share of prompt tokens served
from the cache.

DuckDB does all the summing (``queries/token_mix_groups.sql``: the window's requests rolled up
per hour x session x dimension, then grouped however the report asks), so a token-mix report
imports neither Polars nor Arrow; Python only shapes the few result rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kvtrace.analyze.pricing import Pricing, load_pricing, price_rows
from kvtrace.errors import ConfigError

# Report key -> warehouse column, in the order reports show them.
CLASSES: dict[str, str] = {
    "cache_read": "cache_read_tokens",
    "cache_write_5m": "cache_write_5m_tokens",
    "cache_write_1h": "cache_write_1h_tokens",
    "cache_write_unknown": "cache_write_unknown_tokens",
    "output": "output_tokens",
    "input_uncached": "input_tokens",
}
WRITE_KEYS = ("cache_write_5m", "cache_write_1h", "cache_write_unknown")

# --group-by names (their key expressions are in queries/token_mix_groups.sql).
GROUPS: tuple[str, ...] = (
    "day",
    "hour",
    "week",
    "month",
    "model",
    "user",
    "session",
    "query_source",
    "agent",
    "project",
)
TIME_GROUPS = ("day", "hour", "week", "month")


def mix_from_totals(t: dict) -> dict:
    """``token_mix`` dict (classes, total, shares, hit ratio) from per-class totals."""
    mix = {k: int(t.get(k) or 0) for k in CLASSES}
    total = sum(mix.values())
    prompt = mix["cache_read"] + sum(mix[k] for k in WRITE_KEYS) + mix["input_uncached"]
    mix["total"] = total
    mix["shares"] = {k: (mix[k] / total if total else 0.0) for k in [*CLASSES, "total"]}
    mix["cache_hit_ratio"] = mix["cache_read"] / prompt if prompt else 0.0
    return mix


@dataclass
class TokenMix:
    """The token mix of a window: overall, per asked group, and the chart series."""

    requests: int = 0
    sessions: int = 0
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    mix: dict = field(default_factory=lambda: mix_from_totals({}))
    groups: dict[str, list[dict]] = field(default_factory=dict)
    series_bucket: str = "day"
    series: list[dict] = field(default_factory=list)
    cost: dict = field(default_factory=dict)  # the window's cost entry (see ``_cost``)


def check_timezone(name: str) -> str:
    """An IANA time zone name (``Europe/Berlin``), or ConfigError naming the option."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"unknown --timezone '{name}'", hint="use an IANA name such as UTC, Europe/Berlin or America/New_York"
        ) from None
    return name


COST_UNITS_PER_USD = 10**16  # queries/token_mix_groups.sql sums money in these integer units


def _cost(units, unpriced, reported) -> dict:
    """Cost fields of an entry: list-price ``cost_usd`` (null when no request has a price),
    ``unpriced_requests`` and ``reported_cost_usd`` (null when the telemetry reported none)."""
    return {
        "cost_usd": None if units is None else int(units) / COST_UNITS_PER_USD,
        "unpriced_requests": int(unpriced or 0),
        "reported_cost_usd": None if reported is None else float(reported),
    }


def token_mix_report(
    store,
    since: datetime | None,
    until: datetime | None,
    groups: list[str],
    hourly_max_s: float,
    metric_points: int | None = None,
    pricing: Pricing | None = None,
    tz: str = "UTC",
) -> TokenMix:
    """Token mix of the requests in ``[since, until)`` (None: open), overall and per group.

    Args:
        store: the warehouse.
        since, until: the window (naive UTC).
        groups: ``--group-by`` names (see :data:`GROUPS`).
        hourly_max_s: the chart series is per hour when the requests span at most this long,
            else per day.
        metric_points: the warehouse's metric point count when the caller has it (None: counted here).
        pricing: the price table for ``cost_usd`` (default: the built-in list prices).
        tz: the IANA time zone of the time keys (hour, day, week, month, chart buckets).

    Returns:
        A :class:`TokenMix`; each group's entries (``{key, requests, sessions, token_mix,
        cost_usd, unpriced_requests, reported_cost_usd}``) come by key for time groups, else
        largest total first.
    """
    pricing = pricing or load_pricing()
    # Without metric points request_usage holds just the requests: read the table, not the view.
    if metric_points is None:
        metric_points = store.scalar("SELECT count(*) FROM metric_points")
    usage = "requests" if metric_points == 0 else None
    from kvtrace.store.store import ROLLUP_MEMORY

    with store.memory_capped(ROLLUP_MEMORY):  # the rollup per hour and session spills beyond it
        rows = store.named(
            "token_mix_groups",
            {
                "since": since,
                "until": until,
                "groups": ",".join(groups),
                "hourly_max_s": hourly_max_s,
                "usage": usage,
                "tz": tz,
                "prices": price_rows(pricing),
                "write_5m": pricing.write_5m,
                "write_1h": pricing.write_1h,
                "read": pricing.read,
            },
        ).fetchall()

    out = TokenMix(groups={g: [] for g in groups}, cost=_cost(None, 0, None))
    for grp, key, requests, sessions, *classes, cost, unpriced, reported, first_ts, last_ts in rows:
        totals = dict(zip(CLASSES, classes))
        if grp == "total":
            out.requests, out.sessions, out.first_ts, out.last_ts = int(requests), int(sessions), first_ts, last_ts
            out.mix = mix_from_totals(totals)
            out.cost = _cost(cost, unpriced, reported)
            continue
        entry = {
            "key": key,
            "requests": int(requests),
            "sessions": int(sessions),
            "token_mix": mix_from_totals(totals),
            **_cost(cost, unpriced, reported),
        }
        if grp.startswith("series:"):
            out.series_bucket = grp.split(":", 1)[1]
            out.series.append(entry)
        else:
            out.groups[grp].append(entry)
    _sort(out.series, out.series_bucket)
    for g, entries in out.groups.items():
        _sort(entries, g)
    return out


def _sort(entries: list[dict], group: str) -> None:
    if group in TIME_GROUPS:
        entries.sort(key=lambda e: (e["key"] is None, e["key"] or ""))
    else:  # ties (equal totals) by key, so that the order never depends on hashing
        entries.sort(key=lambda e: (-e["token_mix"]["total"], e["key"] is None, e["key"] or ""))


def no_data_text(store, since: datetime | None = None, until: datetime | None = None) -> str:
    """The one line that stands in for an answer over no requests (a report, replay or reuse):
    an empty warehouse and an empty window ``[since, until)`` are told apart, and an empty window
    says what the warehouse holds, so that nobody reads zeros as a measurement."""
    first, last, _requests, _points, blocks = store.named("usage_bounds").fetchall()[0]
    if first is None and not blocks:
        return "No data: the warehouse holds no requests (ingest telemetry first: kvtrace ingest PATH)."

    def iso(dt):
        return dt.isoformat(timespec="seconds") + "Z"

    held = (
        f"the warehouse holds {iso(first)} → {iso(last)}"
        if first is not None
        else f"the warehouse holds {blocks:,} block-hash trace requests, none of them here"
    )
    return (
        f"No data: no requests from {iso(since) if since else 'the first record'} to "
        f"{iso(until) if until else 'the last record'}; {held}."
    )
