"""The registry of report sections: every section shows up in every rendering its declaration
asks for (tables in the terminal, Markdown and HTML; charts on the page and as files; warnings
in the terminal and Markdown; details on the page), under the registry's title and in its
order; a section added to the registry alone reaches every rendering; a profile can ask for
every section."""

from __future__ import annotations

import io
import re
from html import escape
from dataclasses import replace
from datetime import datetime

import pytest
from rich.console import Console

from kvtrace.report import registry
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.report.charts import ChartSpec
from kvtrace.report.html import _body, _table, export_images
from kvtrace.report.render import render_json, render_markdown, render_terminal
from kvtrace.report.tables import TableSpec
from kvtrace.schedule.periods import period_for
from kvtrace.schedule.profile import profile_from_dict
from kvtrace.schedule.run import report_options
from tests.report_samples import week_store

# Every section: group_by, TTLs (the 30-day one is longer than the trace, so there are warnings),
# a tier replay with a model and the serving model of two configurations (one with an offload tier).
FULL = ReportOptions(
    group_by=["day", "model"],
    ttls=[300.0, 3600.0, 30 * 86400.0],
    tiers="seed-testbed",
    model="MiniMax-M2.7:fp8",
    simulate=["gpu=seed-testbed:HBM", "dram=seed-testbed:HBM,DRAM"],
)


@pytest.fixture(scope="module")
def store_week():
    with week_store() as s:
        yield s


@pytest.fixture(scope="module")
def full(store_week):
    return build_report(store_week, FULL).data


def terminal(d: dict) -> str:
    buf = io.StringIO()
    render_terminal(d, Console(file=buf, width=400))
    return buf.getvalue()


def markdown(d: dict) -> str:
    buf = io.StringIO()
    render_markdown(d, buf)
    return buf.getvalue()


def page(d: dict, charts: list) -> str:
    return _body(d, {c.id: c for c in charts})


def _h2_spans(html: str) -> dict[str, str]:
    """Each <h2> heading of the page -> the page from it to the next <h2>."""
    parts = re.split(r"(<h2>[^<]*</h2>)", html)
    return {parts[i][4:-5]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_section_appears_in_every_rendering_it_declares(full, tmp_path):
    text, md, charts = terminal(full), markdown(full), registry.build_charts(full)
    html = page(full, charts)
    spans = _h2_spans(html)
    files = {p.stem for p in export_images(full, tmp_path, formats=("svg",), charts=charts)}
    for s in registry.SECTIONS:
        tables, warnings = registry.section_tables(s, full), s.warnings(full)
        own = [c for c in charts if c.section == s.key]
        assert tables or own or warnings, f"{s.key}: the fixture should show every section"
        assert len(own) == len(s.charts), f"{s.key}: {len(own)} of {len(s.charts)} charts built"
        if s.compute:
            assert s.when(FULL) and s.key in full, f"{s.key}: not computed into the JSON"
        if s.title:
            assert s.title in spans, f"{s.key}: no <h2>{s.title}</h2> on the page"
        for i, t in enumerate(tables):
            assert f"## {t.title}\n" in md, f"{s.key}: table {t.title!r} not in Markdown"
            assert t.title in text, f"{s.key}: table {t.title!r} not in the terminal"
            if i == 0 and s.title:
                # the first table is titled by the registry's title (or its own, which starts with it)
                assert t.title.startswith(s.title), (s.key, t.title)
                assert _table(t) in spans[s.title], f"{s.key}: first table not under its heading"
            else:
                assert f"<h3>{escape(t.title)}</h3>{_table(t)}" in html, f"{s.key}: table {t.title!r} not on the page"
        for c in own:
            assert f'id="chart-{c.id}"' in spans[s.title], f"{s.key}: chart {c.id} not in its section"
            if tables:  # before or after the section's tables, as declared
                before = spans[s.title].index(f'id="chart-{c.id}"') < spans[s.title].index("<table>")
                assert before == s.charts_first, f"{s.key}: chart {c.id} on the wrong side of its tables"
            assert c.id in files, f"{s.key}: chart {c.id} not written as a file"
        for w in warnings:
            assert f"**Warning:** {w}" in md and w in text, f"{s.key}: warning missing"
            assert f"<li><strong>Warning:</strong> {escape(w)}</li>" in html, f"{s.key}: warning not on the page"
        if s.details:
            summary, items = s.details
            assert items(full) and f"<summary>{summary}</summary>" in spans[s.title], s.key
    # reading order: the sections come in the registry's order in every rendering
    assert list(spans) == [s.title for s in registry.SECTIONS if s.title]
    firsts = [registry.section_tables(s, full)[0].title for s in registry.SECTIONS if registry.section_tables(s, full)]
    for out in (md, text):
        at = [out.index(t) for t in firsts]
        assert at == sorted(at), "sections out of the registry's order"


def test_a_section_declared_in_the_registry_alone_reaches_every_rendering(store_week, monkeypatch):
    extra = registry.Section(
        "extra",
        "An added section",
        when=lambda opts: bool(opts.ttls),
        compute=lambda store, opts, win: {"value": 42},
        tables=lambda d: (
            [TableSpec("extra", None, ("Name", "Value"), [("answer", str(d["extra"]["value"]))])]
            if d.get("extra")
            else []
        ),
        charts=(
            lambda d: (
                ChartSpec(
                    "extra-chart",
                    "Extra chart",
                    "An added chart.",
                    {
                        "mark": "point",
                        "data": {"values": [{"x": 1}]},
                        "encoding": {"x": {"field": "x", "type": "quantitative"}},
                    },
                )
                if d.get("extra")
                else None
            ),
        ),
        warnings=lambda d: ["An added warning."] if d.get("extra") else [],
    )
    monkeypatch.setattr(registry, "SECTIONS", registry.SECTIONS + (extra,))

    plain = build_report(store_week, ReportOptions()).data
    assert "extra" not in plain and "An added section" not in markdown(plain)

    d = build_report(store_week, ReportOptions(ttls=[300.0])).data
    assert d["extra"] == {"value": 42} and list(d)[-2:] == ["extra", "no_data"]  # after the known keys
    buf = io.StringIO()
    render_json(d, buf)
    assert '"extra": {\n    "value": 42\n  }' in buf.getvalue()
    md, text = markdown(d), terminal(d)
    assert "## An added section\n\n| Name | Value |" in md and "**Warning:** An added warning." in md
    assert md.index("## API spend by cache TTL") < md.index("## An added section")
    assert "An added section" in text and "Warning: An added warning." in text
    charts = registry.build_charts(d)
    assert charts[-1].id == "extra-chart" and charts[-1].section == "extra"  # after the known charts
    spans = _h2_spans(page(d, charts))
    assert "<th>Name</th>" in spans["An added section"] and 'id="chart-extra-chart"' in spans["An added section"]


def test_a_table_without_its_own_title_has_its_sections(full):
    for t in registry.report_tables(full):
        assert t.title, t.key
    (mix,) = registry.section_tables(registry.SECTIONS[0], full)
    assert mix.title == registry.SECTIONS[0].title == "Token mix"
    assert registry.titled(replace(mix, title="Own")).title == "Own"


def test_the_json_and_the_chart_files_keep_their_pinned_orders(full):
    keys = [k for k in full if k in {s.key for s in registry.computed()}]
    # the pinned keys first, in their order; a section added since comes after them
    assert keys == [*registry.JSON_ORDER, "simulate"]
    ids = [c.id for c in registry.build_charts(full)]
    assert ids == [
        "token-mix-over-time",
        "reuse-time-cdf",
        "miss-ratio-curves",
        "working-set",
        "ttft",
        "writes-dwpd",
        "spend",
        "sim-throughput",
        "sim-occupancy",
        "sim-ttft",
    ]
    # the pinned orders name only what the registry declares, and keep each section's charts in
    # their declared order (the page places them in build order)
    assert set(registry.JSON_ORDER) <= {s.key for s in registry.SECTIONS if s.compute}
    assert set(registry.CHART_ORDER) <= {b for s in registry.SECTIONS for b in s.charts}
    for s in registry.SECTIONS:
        ranks = [registry.CHART_ORDER.index(b) for b in s.charts if b in registry.CHART_ORDER]
        assert ranks == sorted(ranks), s.key


def test_a_profile_can_ask_for_exactly_the_registrys_sections():
    """The options a scheduled run builds from a profile's [analysis] table enable every section of
    the registry when all are set, and only those always shown when none is."""
    period = period_for("last 1d", datetime(2026, 11, 4, 0, 15))
    every = profile_from_dict(
        {
            "analysis": {
                "ttls": ["5m", "1h"],
                "tiers": "seed-testbed",
                "model": "MiniMax-M2.7:fp8",
                "tier_ttl": "1h",
                "group_by": ["day"],
                "capacities": [1e6],
                "simulate": ["gpu=seed-testbed:HBM"],
            }
        },
        name="all",
    )
    opts = report_options(every, period)
    assert [s.key for s in registry.SECTIONS if s.when(opts)] == [s.key for s in registry.SECTIONS]
    bare = report_options(profile_from_dict({}, name="bare"), period)
    assert [s.key for s in registry.SECTIONS if s.when(bare)] == ["token_mix"]
