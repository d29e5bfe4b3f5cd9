"""The HTML report: charts appear exactly when their data exists, the page is self-contained, it
renders in a real (headless, offline) browser, and PNG/SVG copies decode at the expected size."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.report import render
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.report.charts import OKABE_ITO
from kvtrace.report.registry import build_charts
from kvtrace.report.html import PNG_SCALE, export_images, js_bundle, render_html
from kvtrace.store import Store
from tests.conftest import require_tool
from tests.headless import Dom, dump_dom
from tests.report_samples import load_rows, png_size, walk_spec as _walk, week_rows, week_store, with_tiers

ALL_CHARTS = [
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


@pytest.fixture(scope="module")
def store_week():
    with week_store() as s:
        yield s


@pytest.fixture(scope="module")
def base_data(store_week):
    return build_report(store_week, ReportOptions(group_by=["day", "model"], title="Fleet <week> & co")).data


@pytest.fixture(scope="module")
def full_data(store_week):
    """Every section, from the real analyses: reuse, TTL, spend, the tier replay and the serving model."""
    opts = ReportOptions(
        group_by=["day", "model"],
        ttls=[300.0, 3600.0],
        tiers="seed-testbed",
        model="MiniMax-M2.7:fp8",
        title="Fleet <week> & co",
        simulate=["gpu=seed-testbed:HBM", "dram=seed-testbed:HBM,DRAM"],
    )
    return build_report(store_week, opts).data


# -- charts follow the data -----------------------------------------------------------------------


def test_every_chart_when_every_section_exists(full_data):
    assert [c.id for c in build_charts(full_data)] == ALL_CHARTS


def test_token_mix_only_report_has_only_the_time_chart(base_data):
    assert [c.id for c in build_charts(base_data)] == ["token-mix-over-time"]


@pytest.mark.parametrize(
    "drop, gone",
    [
        ("reuse", {"reuse-time-cdf"}),
        ("spend", {"spend"}),
        ("ttl", {"working-set"}),
        ("tiers", {"miss-ratio-curves", "ttft", "writes-dwpd"}),
        ("simulate", {"sim-throughput", "sim-occupancy", "sim-ttft"}),
    ],
)
def test_a_chart_disappears_with_its_data(full_data, drop, gone):
    d = {k: v for k, v in full_data.items() if k != drop}
    assert {c.id for c in build_charts(d)} == set(ALL_CHARTS) - gone


def test_ttft_falls_back_to_quantiles_without_cdfs(base_data):
    (chart,) = [c for c in build_charts(with_tiers(base_data)) if c.id == "ttft"]
    rows = [
        r
        for node in _walk(chart.spec)
        if isinstance(node.get("values"), list)
        for r in node["values"]
        if isinstance(r, dict)
    ]  # not an axis's tick values
    assert {r["q"] for r in rows} == {"p50", "p90", "p99", "max"}
    assert {r["cohort"] for r in rows} == {"Continuing", "Resumed after idle"}


def test_tier_boundaries_are_depths_in_the_lru_stack(full_data):
    (chart,) = [c for c in build_charts(full_data) if c.id == "miss-ratio-curves"]
    rows = [
        r
        for node in _walk(chart.spec)
        if isinstance(node.get("values"), list)
        for r in node["values"]
        if isinstance(r, dict) and "depth_tokens" in r
    ]
    assert sorted({r["depth_tokens"] for r in rows}) == [t["depth_tokens"] for t in full_data["tiers"]["tiers"]]


def test_time_chart_falls_back_to_groups(base_data):
    d = {k: v for k, v in base_data.items() if k != "series"}
    (chart,) = build_charts(d)
    rows = [
        r
        for node in _walk(chart.spec)
        if isinstance(node.get("values"), list)
        for r in node["values"]
        if isinstance(r, dict)
    ]
    days = {e["key"] for e in base_data["groups"]["day"]}
    assert {r["t"][:10] for r in rows} == days


def test_axes_have_titles_and_colours_are_colour_blind_safe(full_data):
    greys = {"#555", "#333", "#999", "#e6e6e6", "white", "black"}
    for chart in build_charts(full_data):
        # a layer's axis is shared with its sibling layers: Vega-Lite draws a sibling's title on it
        shared = {
            id(layer): {
                ch
                for sib in node["layer"]
                for ch in ("x", "y")
                if ((sib.get("encoding") or {}).get(ch) or {}).get("title")
            }
            for node in _walk(chart.spec)
            if isinstance(node.get("layer"), list)
            for layer in node["layer"]
        }
        for node in _walk(chart.spec):
            enc = node.get("encoding") if isinstance(node.get("encoding"), dict) else {}
            for ch in ("x", "y"):
                e = enc.get(ch)
                if isinstance(e, dict) and e.get("type") in ("quantitative", "temporal") and "field" in e:
                    assert e.get("title") or ch in shared.get(id(node), ()), (
                        f"{chart.id}: {ch} axis of {e['field']} has no title"
                    )
            for key in ("color", "fill", "stroke"):
                v = node.get(key)
                if isinstance(v, str) and v.startswith("#") or v in ("white", "black"):
                    assert v in OKABE_ITO or v in greys, f"{chart.id}: colour {v} is outside the palette"
        assert chart.spec["config"]["range"]["category"] == OKABE_ITO


# -- the page -------------------------------------------------------------------------------------


def test_page_is_self_contained_and_escaped(full_data):
    page = render_html(full_data)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert js_bundle() in page and "window.vegaEmbed" in js_bundle()  # the libraries are inlined
    own = page.replace(js_bundle(), "")
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", own), "the page loads an external resource"
    assert "Fleet &lt;week&gt; &amp; co" in page and "Fleet <week>" not in page
    for chart in build_charts(full_data):
        assert f'data-chart="{chart.id}"' in page
    assert render.fmt_pct(full_data["token_mix"]["shares"]["cache_read"]) in page


def test_empty_warehouse_renders_without_charts():
    with Store(memory=True) as s:
        d = build_report(s).data
    page = render_html(d)
    assert 'data-charts="0"' in page and "No data: the warehouse holds no requests" in page


@pytest.mark.slow
def test_page_renders_in_headless_chromium_offline(full_data, tmp_path):
    chromium = require_tool("chromium")
    page = tmp_path / "report.html"
    page.write_text(render_html(full_data), encoding="utf-8")
    dom_text = dump_dom(chromium, page, tmp_path / "profile")
    dom = Dom(dom_text)
    status = dom.by_id["kvtrace-status"]
    log = re.search(r'<div id="kvtrace-status"[^>]*>(.*?)</div>', dom_text, re.S).group(1)
    assert status.get("data-done") == "1", "the charts did not finish: " + log
    assert status["data-errors"] == "0", "errors in the page: " + log
    assert status["data-warnings"] == "0", "warnings in the page: " + log
    assert status["data-rendered"] == status["data-charts"] == str(len(ALL_CHARTS))
    for cid in ALL_CHARTS:
        assert dom.charts[cid].get("data-rendered") == "ok", cid
        assert dom.svg_in_chart.get(cid, 0) >= 1, f"{cid}: vega-embed drew no SVG"
    text = dom.visible_text()
    mix = full_data["token_mix"]
    for headline in (
        render.fmt_int(full_data["requests"]),
        render.fmt_int(full_data["sessions"]),
        render.fmt_pct(mix["cache_hit_ratio"]),
        render.fmt_pct(mix["shares"]["cache_read"]),
        render.fmt_int(mix["total"]),
    ):
        assert headline in text, headline


@pytest.mark.slow
def test_a_broken_chart_is_reported_by_the_page(base_data, tmp_path):
    chromium = require_tool("chromium")
    charts = build_charts(base_data)
    charts[0].spec["mark"] = {"type": "no-such-mark"}  # vega-embed must reject this
    charts[0].spec.pop("vconcat", None)
    page = tmp_path / "broken.html"
    page.write_text(render_html(base_data, charts=charts), encoding="utf-8")
    dom = Dom(dump_dom(chromium, page, tmp_path / "profile"))
    assert dom.by_id["kvtrace-status"]["data-errors"] != "0"
    assert dom.charts[charts[0].id].get("data-rendered") == "error"


# -- images ---------------------------------------------------------------------------------------


def test_png_and_svg_copies_decode_at_the_expected_size(full_data, tmp_path):
    files = export_images(full_data, tmp_path)
    assert sorted(p.name for p in files) == sorted(f"{c}.{ext}" for c in ALL_CHARTS for ext in ("png", "svg"))
    for cid in ALL_CHARTS:
        svg = ET.parse(tmp_path / f"{cid}.svg").getroot()
        w, h = float(svg.get("width")), float(svg.get("height"))
        pw, ph = png_size((tmp_path / f"{cid}.png").read_bytes())
        assert (pw, ph) == (round(w * PNG_SCALE), round(h * PNG_SCALE)), cid
        assert pw >= 600 * PNG_SCALE, f"{cid} is narrower than the chart width"


# -- the command ----------------------------------------------------------------------------------


def test_report_command_writes_html(tmp_path):
    db = tmp_path / "kv.duckdb"
    with Store(db) as s:
        load_rows(s, week_rows(days=2))
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", "--db", str(db), "--format", "html", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'data-chart="token-mix-over-time"' in page


# -- the documented schema ------------------------------------------------------------------------


def test_schema_doc_names_every_key_of_the_dict(full_data):
    from pathlib import Path

    from kvtrace.report.build import SCHEMA_VERSION

    doc = (Path(__file__).resolve().parents[1] / "docs" / "report-schema.md").read_text()
    assert f"**Schema version:** `{SCHEMA_VERSION}`" in doc
    d = full_data
    leaves = set(d) | set(d["window"]) | set(d["token_mix"]) | set(d["token_mix"]["shares"]) | set(d["series"])
    leaves |= set(d["ttl"][0]) | set(d["ttl"][0]["working_set"]) | set(d["ttl"][0]["working_set"]["series"])
    leaves |= set(d["reuse"]) | set(d["reuse"]["reuse_time"]) | set(d["reuse"]["trace"])
    leaves |= set(d["spend"]) | set(d["spend"]["ttl"][0])
    leaves |= set(d["tiers"]) | set(d["tiers"]["grid"][0]) | set(d["tiers"]["ttft"]) | set(d["tiers"]["ttft"]["all"])
    leaves |= {k for t in d["tiers"]["tiers"] for k in t} | set(d["tiers"]["tiers"][0]["series"])
    leaves |= set(d["simulate"])  # its configs[] are docs/simulate.md's
    # A key is documented when it appears as a name: in backticks, a {list}, or after a dot.
    missing = sorted(k for k in leaves if not re.search(r"[`{\s.]" + re.escape(k) + r"[`}, :.\]]", doc))
    assert not missing, f"undocumented report keys: {missing}"
