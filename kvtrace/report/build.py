"""Build the report: one result object (a JSON-ready dict) that every renderer reads.

Renderers (terminal, JSON, Markdown, HTML) never recompute: they format ``Report.data``.
Analyses beyond the token mix (TTL what-if, tier replay) are optional sections, each computed
only when its options ask for it (``kvtrace.report.registry`` declares them). The schema is documented in ``docs/report-schema.md``;
``SCHEMA_VERSION`` changes when a key changes meaning or disappears.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from kvtrace import __version__
from kvtrace.errors import ConfigError
from kvtrace.analyze.pricing import load_pricing
from kvtrace.analyze.token_mix import GROUPS, check_timezone, no_data_text, token_mix_report
from kvtrace.report import registry
from kvtrace.window import iso, parse_instant
from kvtrace.store import Store

SCHEMA_VERSION = "1.0"


@dataclass
class ReportOptions:
    """What a report covers. Every field has a CLI option of the same name."""

    since: str | None = None
    until: str | None = None
    group_by: list[str] = field(default_factory=list)
    ttls: list[float] = field(default_factory=list)  # seconds; adds the `ttl` section
    model: str | None = None  # KV geometry for bytes (catalog name)
    tiers: str | None = None  # tier preset or file; adds `tiers`
    tier_ttl: float | None = None  # seconds; the hierarchy's idle TTL (see tier_ttl_s)
    capacities: list[float] = field(default_factory=list)  # tokens; grid points for `tiers`/`replay`
    title: str = "kvtrace report"
    timezone: str = "UTC"  # IANA zone of day boundaries and naive bounds
    pricing: str | None = None  # price table TOML (default: built-in list prices)
    simulate: list[str] = field(default_factory=list)  # [NAME=]TIERS[:TIER,...] each; adds `simulate`


def tier_ttl_s(opts: ReportOptions) -> float | None:
    """The idle TTL the tier replay runs at: ``tier_ttl``, else the one --ttl when exactly one is
    given (as ``kvtrace replay``), else none."""
    if opts.tier_ttl is not None:
        return None if opts.tier_ttl == float("inf") else opts.tier_ttl
    return opts.ttls[0] if len(opts.ttls) == 1 else None


@dataclass
class Report:
    data: dict

    def to_dict(self) -> dict:
        return self.data


def _window(store: Store, opts: ReportOptions) -> dict:
    first, last, _requests, metric_points, blocks = store.named("usage_bounds").fetchall()[0]
    since = parse_instant(opts.since, last, opts.timezone)
    until = parse_instant(opts.until, last, opts.timezone)
    if since and until and since >= until:
        raise ConfigError(f"--since {opts.since} is not before --until {opts.until}")
    return {
        "since": since,
        "until": until,
        "first": first,
        "last": last,
        "metric_points": metric_points,
        "block_requests": blocks,
    }


def report_no_data(store: Store, win: dict, opts: ReportOptions) -> str:
    """The sentence a report without any request shows instead of its tables (zeros would read
    as a measurement); a warehouse holding only block-hash traces says how to report on them."""
    if win["first"] is None and win["block_requests"] and not (opts.ttls or opts.tiers):
        return (
            f"No token telemetry: the warehouse holds only block-hash traces ({win['block_requests']:,} "
            "requests); add --ttl or --tiers to replay them."
        )
    return no_data_text(store, win["since"], win["until"])


# Windows up to this long are charted per hour, longer ones per day.
HOURLY_SERIES_MAX_S = 3 * 86400


def build_report(store: Store, opts: ReportOptions | None = None) -> Report:
    """Compute the report for a warehouse.

    Args:
        store: the warehouse (may be opened read-only).
        opts: window, grouping and optional analyses.
    """
    opts = opts or ReportOptions()
    check_timezone(opts.timezone)
    pricing = load_pricing(opts.pricing)
    for g in opts.group_by:
        if g not in GROUPS:
            raise ConfigError(f"unknown --group-by '{g}'", hint="choose from " + ", ".join(GROUPS))
    win = _window(store, opts)
    tm = token_mix_report(
        store,
        win["since"],
        win["until"],
        opts.group_by,
        HOURLY_SERIES_MAX_S,
        metric_points=win["metric_points"],
        pricing=pricing,
        tz=opts.timezone,
    )
    data: dict = {
        "schema_version": SCHEMA_VERSION,
        "generator": f"kvtrace {__version__}",
        "generated_at": iso(datetime.now(timezone.utc)),
        "title": opts.title,
        "window": {
            "since": iso(win["since"]),
            "until": iso(win["until"]),
            "first_request": iso(tm.first_ts),
            "last_request": iso(tm.last_ts),
            "timezone": opts.timezone,
        },
        "requests": tm.requests,
        "sessions": tm.sessions,  # requests without a session are not a session
        "token_mix": tm.mix,
        # list-price cost of the window's token classes (every group entry carries the same keys)
        "cost": {**tm.cost, "pricing": pricing.source},
        "groups": tm.groups,
        # Time series for charts (``series`` in docs/report-schema.md): the token mix per hour for
        # windows up to three days, else per day, whatever --group-by asks for.
        "series": {"token_mix": {"bucket": tm.series_bucket, "entries": tm.series}},
    }
    computed = registry.computed()
    for section in computed:  # they share `win` (and the block trace cached in it)
        if section.when(opts):
            value = section.compute(store, opts, win)
            if value is not None:
                data[section.key] = value
    sections = any(data.get(s.key) for s in computed)
    data["no_data"] = None if tm.requests or sections else report_no_data(store, win, opts)
    return Report(data)
