"""The report's sections, each declared once: its key, when it is computed, how, its tables, its
charts and its title, in reading order. Every rendering reads this list: ``build_report`` computes
the sections, the terminal and Markdown draw their tables and warnings, the HTML page their
headings, tables, charts, warnings and details, the PNG/SVG export their charts.

Adding a section means adding one :class:`Section` to ``SECTIONS`` (with its compute, table and
chart functions in ``sections.py``, ``tables.py`` and ``charts.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from kvtrace.report import sections
from kvtrace.report.charts import (
    ChartSpec,
    miss_ratio_curves,
    reuse_time_cdf,
    simulate_occupancy,
    simulate_throughput,
    simulate_ttft,
    spend_by_ttl,
    token_mix_over_time,
    ttft_distributions,
    working_set_over_time,
    writes_and_dwpd,
)
from kvtrace.report.tables import (
    TableSpec,
    capacity_table,
    group_table,
    mix_table,
    reuse_table,
    sim_assumptions,
    simulate_tables,
    spend_table,
    tier_table,
    ttft_table,
    ttl_table,
)


@dataclass(frozen=True)
class Section:
    """One part of the report.

    ``title`` heads the section on the HTML page and titles its first table in the terminal and
    Markdown (a table with its own title keeps it); a section without one has no heading, and
    each of its tables stands under its own title. ``tables`` and ``charts`` read ``Report.data``
    and return ``None`` (or no tables) when the report lacks the section's data.
    """

    key: str  # its key in Report.data (ttft: inside tiers)
    title: str | None
    when: Callable[[Any], bool]  # on ReportOptions: the options ask for it
    compute: Callable[[Any, Any, dict], Any] | None = None  # (store, opts, window) -> Report.data[key];
    #                                                    None: built with another part (token mix, tiers)
    tables: Callable[[dict], list[TableSpec | None]] = lambda d: []  # terminal, Markdown, HTML
    charts: tuple[Callable[[dict], ChartSpec | None], ...] = ()  # HTML, PNG/SVG
    charts_first: bool = False  # on the page, its charts come before its tables
    warnings: Callable[[dict], list[str]] = lambda d: []  # sentences after its tables (terminal, Markdown, HTML)
    details: tuple[str, Callable[[dict], list]] | None = None  # HTML: a folded list (summary, items)


def _option(name: str) -> Callable[[Any], bool]:
    """Enabled when the report option ``name`` is set (non-empty)."""
    return lambda opts: bool(getattr(opts, name))


def _tiers(d: dict) -> dict:
    return d.get("tiers") or {}


SECTIONS: tuple[Section, ...] = (
    Section(
        "token_mix", "Token mix", when=lambda opts: True, tables=lambda d: [mix_table(d)], charts=(token_mix_over_time,)
    ),
    Section(
        "reuse",
        "Context reuse",
        when=_option("ttls"),
        compute=sections.reuse_section,
        tables=lambda d: [reuse_table(d["reuse"])] if d.get("reuse") else [],
        charts=(reuse_time_cdf,),
        charts_first=True,
    ),
    Section(
        "ttl",
        "TTL what-if and required capacity",
        when=_option("ttls"),
        compute=sections.ttl_section,
        tables=lambda d: [ttl_table(d)] if d.get("ttl") else [],
        charts=(working_set_over_time,),
    ),
    Section(
        "tiers",
        "Tiers",
        when=_option("tiers"),
        compute=sections.tiers_section,
        tables=lambda d: [tier_table(_tiers(d)), capacity_table(_tiers(d))] if _tiers(d) else [],
        charts=(miss_ratio_curves, writes_and_dwpd),
        details=("Assumptions of the replay", lambda d: _tiers(d).get("assumptions")),
    ),
    Section(
        "ttft",
        "Time to first token",
        when=_option("tiers"),
        tables=lambda d: [ttft_table(_tiers(d)["ttft"])] if _tiers(d).get("ttft") else [],
        charts=(ttft_distributions,),
        charts_first=True,
    ),
    Section(
        "spend",
        "API spend by cache TTL",
        when=_option("ttls"),
        compute=sections.spend_section,
        tables=lambda d: [spend_table(d["spend"])] if d.get("spend") else [],
        charts=(spend_by_ttl,),
        charts_first=True,
    ),
    Section(
        "simulate",
        "Serving model (simulated)",
        when=_option("simulate"),
        compute=sections.simulate_section,
        tables=lambda d: simulate_tables(d["simulate"]) if d.get("simulate") else [],
        charts=(simulate_throughput, simulate_occupancy, simulate_ttft),
        details=("Assumptions of the serving model", lambda d: sim_assumptions(d.get("simulate"))),
    ),
    Section(
        "groups",
        None,
        when=_option("group_by"),
        tables=lambda d: [
            group_table(g, entries, (d.get("window") or {}).get("timezone", "UTC"))
            for g, entries in (d.get("groups") or {}).items()
        ],
    ),
    Section(
        "warnings",
        None,
        when=_option("ttls"),
        compute=sections.warnings_section,
        warnings=lambda d: d.get("warnings") or [],
    ),
)

# Orders that predate the registry and that readers see, kept as they were; a section or chart
# not listed comes after these, in reading order. The computed sections' keys in the JSON:
JSON_ORDER = ("ttl", "reuse", "spend", "tiers", "warnings")
# The charts as built and written (``--format png`` lists its files in this order; on the page a
# section's charts keep this order among themselves):
CHART_ORDER = (
    token_mix_over_time,
    reuse_time_cdf,
    miss_ratio_curves,
    working_set_over_time,
    ttft_distributions,
    writes_and_dwpd,
    spend_by_ttl,
)


def _rank(order: tuple, item) -> int:
    return order.index(item) if item in order else len(order)


def computed() -> list[Section]:
    """The sections ``build_report`` computes, in the order of their keys in the JSON."""
    return sorted((s for s in SECTIONS if s.compute), key=lambda s: _rank(JSON_ORDER, s.key))


def titled(spec: TableSpec) -> TableSpec:
    """A table with its title: its own, else its section's (the first table of a section is
    titled by it)."""
    return spec if spec.title else replace(spec, title=next(s.title for s in SECTIONS if s.key == spec.key))


def section_tables(section: Section, d: dict) -> list[TableSpec]:
    """The section's tables for ``d``, titled; tables without data are left out."""
    return [titled(t) for t in section.tables(d) if t is not None]


def report_tables(d: dict) -> list[TableSpec]:
    """Every table of the report, in reading order; sections without data are left out."""
    return [t for s in SECTIONS for t in section_tables(s, d)]


def build_charts(d: dict) -> list[ChartSpec]:
    """Every chart the report's data supports, each marked with its section, in ``CHART_ORDER``."""
    built = []
    for s in SECTIONS:
        for build in s.charts:
            chart = build(d)
            if chart is not None:
                built.append((_rank(CHART_ORDER, build), replace(chart, section=s.key)))
    return [c for _, c in sorted(built, key=lambda x: x[0])]
