"""The report's charts as a reader sees them: on the sample week (sample_traces/, ingested into a
warehouse), with the tier replay and a model. Checks on the Vega-Lite specs, on the SVG that
vl-convert draws from them (axis labels, titles), on the PNG/SVG files `kvtrace report --format
png|svg` writes, and on the page drawn by headless Chromium at 1,400 px (every chart drawn, series
distinguishable, titles present, no table cell wrapped)."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET

import pytest
import vl_convert as vlc
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.ingest import ingest
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.report.charts import COINCIDE, vl_version
from kvtrace.report.registry import build_charts, report_tables
from kvtrace.report.html import export_images, period_text, render_html
from kvtrace.store import Store
from kvtrace.units import fmt_tokens
from tests.conftest import require_tool
from tests.headless import dump_dom
from tests.paths import ROOT
from tests.report_samples import load_rows, nightly_profile, png_size, walk_spec as _walk, week_rows, with_tiers

MODEL = "MiniMax-M2.7:fp8"
OPTS = dict(ttls=[300.0, 3600.0], tiers="seed-testbed", model=MODEL, group_by=["day", "model"], title="Sample week")


@pytest.fixture(scope="module")
def week_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("week") / "kv.duckdb"
    with Store(db) as s:
        summary = ingest(s, [ROOT / "sample_traces"])
    assert summary.lines_rejected == 0
    return db


@pytest.fixture(scope="module")
def week(week_db):
    """The sample week's report with every section (TTLs 5 min and 1 h, tiers, a model)."""
    with Store(week_db, read_only=True) as s:
        return build_report(s, ReportOptions(**OPTS)).data


@pytest.fixture(scope="module")
def charts(week):
    return {c.id: c for c in build_charts(week)}


def _rows(spec) -> list[dict]:
    return [r for n in _walk(spec) if isinstance(n.get("values"), list) for r in n["values"] if isinstance(r, dict)]


def _svg(spec) -> ET.Element:
    return ET.fromstring(vlc.vegalite_to_svg(spec, vl_version=vl_version()))


def _text(el) -> str:
    return " ".join(t.strip() for t in el.itertext() if t.strip())


def axes(svg: ET.Element) -> dict[str, list[str]]:
    """Axis title -> its tick labels (multi-line labels joined by a space), from a Vega SVG."""
    out = {}
    for g in svg.iter("{http://www.w3.org/2000/svg}g"):
        if g.get("aria-roledescription") != "axis":
            continue
        title = re.search(r"titled '(.*?)' for", g.get("aria-label", ""))
        labels = [
            _text(t)
            for lg in g.iter("{http://www.w3.org/2000/svg}g")
            if "role-axis-label" in (lg.get("class") or "")
            for t in lg.iter("{http://www.w3.org/2000/svg}text")
        ]
        out[title.group(1) if title else ""] = labels
    return out


def titles(svg: ET.Element) -> list[str]:
    return [
        _text(g)
        for g in svg.iter("{http://www.w3.org/2000/svg}g")
        if re.search(r"role-title-(text|subtitle)", g.get("class") or "")
    ]


# -- overlapping series ---------------------------------------------------------------------------


def _line_layers(spec) -> list[dict]:
    return [
        n
        for n in _walk(spec)
        if n.get("mark") in ("line", {"type": "line"})
        or (isinstance(n.get("mark"), dict) and n["mark"].get("type") == "line")
    ]


def test_hit_ratio_curves_that_run_together_stay_visible(charts, week):
    c = charts["miss-ratio-curves"]
    layers = _line_layers(c.spec)
    # One layer per TTL, the longest first (underneath) and widest; no markers on the lines.
    enc = layers[0]["encoding"]
    domain = enc["strokeWidth"]["scale"]["domain"]
    widths = dict(zip(domain, enc["strokeWidth"]["scale"]["range"]))
    dashes = dict(zip(domain, map(tuple, enc["strokeDash"]["scale"]["range"])))
    assert domain == ["5m", "1h", "no TTL"]
    drawn = [json.dumps(lay["transform"][0]["filter"]) for lay in layers]
    assert ["no TTL" in drawn[0], "1h" in drawn[1], "5m" in drawn[2]] == [True, True, True]
    assert widths["no TTL"] > widths["1h"] and widths["no TTL"] > widths["5m"]
    assert len(set(dashes.values())) == 3, "two TTLs share a dash pattern"
    for lay in layers:
        assert not (isinstance(lay["mark"], dict) and lay["mark"].get("point")), "markers hide the line below"
    # The pairs within half a point of each other are named, with where.
    curves: dict = {}
    for g in week["tiers"]["grid"]:
        curves.setdefault(g["ttl_s"], {})[g["capacity_tokens"]] = g["hit_ratio_tokens"]
    close = any(abs(curves[3600.0][k] - curves[None][k]) <= COINCIDE for k in curves[None])
    assert close and "1h and no TTL coincide" in c.caption


def test_identical_ttl_curves_are_one_line_and_said_so(week):
    d = copy.deepcopy(week)
    by_cap = {g["capacity_tokens"]: g["hit_ratio_tokens"] for g in d["tiers"]["grid"] if g["ttl_s"] is None}
    for g in d["tiers"]["grid"]:
        if g["ttl_s"] == 3600.0:
            g["hit_ratio_tokens"] = by_cap[g["capacity_tokens"]]
    c = next(c for c in build_charts(d) if c.id == "miss-ratio-curves")
    assert {r["ttl"] for r in _rows(c.spec) if "hit" in r} == {"5m", "1h = no TTL"}
    assert "The 1h and no TTL curves are identical: one line is drawn." in c.caption


# -- units on capacity axes -----------------------------------------------------------------------


def test_capacity_axes_are_in_bytes_with_a_model(charts, week):
    per_token = week["tiers"]["model"]["bytes_per_token"]
    hit = axes(_svg(charts["miss-ratio-curves"].spec))
    (x_title,) = [t for t in hit if t.startswith("Cache capacity")]
    assert "bytes" in x_title and "MiniMax-M2.7" in x_title
    assert hit[x_title] and all(re.fullmatch(r"\d+(\.\d+)? (B|KB|MB|GB|TB|PB)", lab) for lab in hit[x_title]), hit[
        x_title
    ]
    caps = {r["cap"] for r in _rows(charts["miss-ratio-curves"].spec) if "hit" in r}
    assert caps == {float(g["capacity_bytes"]) for g in week["tiers"]["grid"] if g["capacity_tokens"]}
    ws = axes(_svg(charts["working-set"].spec))
    (y_title,) = [t for t in ws if t.startswith("Working set")]
    assert "bytes" in y_title and all(lab.endswith("B") for lab in ws[y_title]), ws[y_title]
    peak = max(r["v"] for r in _rows(charts["working-set"].spec) if "ttl" in r)
    assert peak == max(e["working_set"]["peak_tokens"] for e in week["ttl"]) * per_token


def test_capacity_axes_stay_in_tokens_without_a_model(week_db):
    with Store(week_db, read_only=True) as s:
        d = with_tiers(build_report(s, ReportOptions(ttls=[300.0, 3600.0])).data)
    for cid, prefix in (("miss-ratio-curves", "Cache capacity"), ("working-set", "Working set")):
        c = next(c for c in build_charts(d) if c.id == cid)
        (title,) = [t for t in axes(_svg(c.spec)) if t.startswith(prefix)]
        assert "tokens" in title and "bytes" not in title


# -- the time axis --------------------------------------------------------------------------------

DATETIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")


def test_working_set_time_axis_has_one_format_with_dates(charts):
    labels = axes(_svg(charts["working-set"].spec))["Time (UTC)"]
    assert len(labels) >= 4 and all(DATETIME.fullmatch(lab) for lab in labels), labels


def test_hourly_token_mix_axis_has_the_same_format(week_db):
    with Store(week_db, read_only=True) as s:
        d = build_report(s, ReportOptions(since="2026-03-05", until="2026-03-06")).data
    (c,) = build_charts(d)
    assert d["series"]["token_mix"]["bucket"] == "hour"
    labels = [lab for t, labs in axes(_svg(c.spec)).items() if t.startswith("Time") for lab in labs]
    assert labels and all(DATETIME.fullmatch(lab) for lab in labels), labels


# -- one source for a number ----------------------------------------------------------------------


def test_working_set_caption_quotes_the_tiers_table(charts, week):
    caption = charts["working-set"].caption
    (table,) = [t for t in report_tables(week) if t.key == "tiers" and "Tier" in t.headers]
    col = table.headers.index("Capacity (tokens)")
    quoted = re.findall(r"(\d+(?:\.\d+)? [KMG]) tokens", caption)
    peak = fmt_tokens(max(e["working_set"]["peak_tokens"] for e in week["ttl"]))
    assert quoted and set(quoted) <= {row[col] for row in table.rows} | {peak}, quoted
    deeper = [t for t in week["tiers"]["tiers"] if t["depth_tokens"] != t["capacity_tokens"]]
    assert deeper and not any(fmt_tokens(t["depth_tokens"]) in caption for t in deeper)


# -- reuse-time CDF -------------------------------------------------------------------------------


def test_reuse_cdf_ends_at_the_trace_span_and_draws_identical_series_once(charts, week):
    c = charts["reuse-time-cdf"]
    span = week["reuse"]["trace"]["span_s"]
    rows = [r for r in _rows(c.spec) if "cdf" in r]
    assert max(r["s"] for r in rows) == span and max(r["cdf"] for r in rows) == 1.0
    x_scales = [n["scale"] for n in _walk(c.spec) if n.get("field") == "s" and "scale" in n]
    assert x_scales and all(sc["domain"][1] == span and sc.get("nice") is False for sc in x_scales)
    assert week["reuse"]["reuse_time"]["cdf"] == week["reuse"]["effective_reuse_time"]["cdf"]
    assert len({r["kind"] for r in rows}) == 1 and "identical" in c.caption


def test_reuse_cdf_keeps_two_lines_when_they_differ(week):
    d = copy.deepcopy(week)
    eff = d["reuse"]["effective_reuse_time"] = dict(d["reuse"]["effective_reuse_time"])
    eff["cdf"] = [dict(p) for p in eff["cdf"]]
    eff["cdf"][2]["share_tokens"] -= 0.05
    c = next(c for c in build_charts(d) if c.id == "reuse-time-cdf")
    assert len({r["kind"] for r in _rows(c.spec) if "cdf" in r}) == 2 and "identical" not in c.caption


# -- DWPD -----------------------------------------------------------------------------------------


def test_dwpd_panel_is_left_out_with_a_sentence_when_no_drive_is_written(charts, week):
    nvme = next(t for t in week["tiers"]["tiers"] if t.get("dwpd_per_drive") is not None)
    assert nvme["write_bytes"] == 0
    c = charts["writes-dwpd"]
    assert "hconcat" not in c.spec and not any(r.get("dwpd") is not None for r in _rows(c.spec))
    assert "No drive tier was written" in c.caption and "NVMe" in c.caption
    assert {"tier": "NVMe", "label": "no writes"} in _rows(c.spec)  # said on the chart too (PNG copies)


def test_dwpd_panel_is_drawn_when_a_drive_is_written(week):
    c = next(c for c in build_charts(with_tiers(week)) if c.id == "writes-dwpd")
    assert "hconcat" in c.spec and any(r.get("dwpd") == 3.2 for r in _rows(c.spec))


# -- TTFT units -----------------------------------------------------------------------------------


def test_ttft_axis_speaks_time_units(charts):
    labels = axes(_svg(charts["ttft"].spec))["Time to first token (log scale)"]
    assert labels and all(re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)", lab) for lab in labels), labels
    assert "100 µs" in labels or "1 ms" in labels


def test_ttft_quantile_fallback_speaks_time_units(week):
    d = with_tiers(week)
    c = next(c for c in build_charts(d) if c.id == "ttft")
    labels = [lab for t, labs in axes(_svg(c.spec)).items() if t.startswith("Time to first") for lab in labs]
    assert labels and all(re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)", lab) for lab in labels), labels


# -- token mix marks ------------------------------------------------------------------------------


def _marks(spec) -> set[str]:
    return {(n["mark"] if isinstance(n["mark"], str) else n["mark"]["type"]) for n in _walk(spec) if "mark" in n}


def test_few_daily_points_are_bars_and_many_hours_are_areas(charts, week):
    assert len(week["series"]["token_mix"]["entries"]) == 5
    assert _marks(charts["token-mix-over-time"].spec) == {"bar"}
    days = [e["key"] for e in week["series"]["token_mix"]["entries"]]
    for title, labels in axes(_svg(charts["token-mix-over-time"].spec)).items():
        if title.startswith("Time"):
            assert labels == days  # one ISO date under each day's bar
    with Store(memory=True) as s:
        load_rows(s, week_rows(days=3, per_day=80))
        d = build_report(s).data
    assert len(d["series"]["token_mix"]["entries"]) >= 24
    assert _marks(build_charts(d)[0].spec) == {"area"}


# -- images ---------------------------------------------------------------------------------------


def test_chart_files_carry_title_and_period(week, tmp_path):
    files = export_images(week, tmp_path, formats=("svg",))
    period = period_text(week)
    assert period.startswith("Sample week · 2026-03-02 09:12 → 2026-03-06 16:34 UTC")
    by_id = {c.id: c for c in build_charts(week)}
    for f in files:
        shown = titles(ET.parse(f).getroot())
        assert by_id[f.stem].title in shown and period in shown, (f.name, shown)


def test_report_command_writes_png_and_svg_files(week_db, tmp_path):
    runner = CliRunner()
    for fmt in ("png", "svg"):
        out = tmp_path / fmt
        res = runner.invoke(
            app,
            ["report", "--db", str(week_db), "--ttl", "5m,1h", "--model", MODEL, "--format", fmt, "--out", str(out)],
        )
        assert res.exit_code == 0, res.output
        names = sorted(p.name for p in out.iterdir())
        assert names == sorted(f"{c}.{fmt}" for c in ("token-mix-over-time", "reuse-time-cdf", "working-set", "spend"))
        assert f"wrote 4 charts to {out}" in res.output
    w, h = png_size((tmp_path / "png" / "working-set.png").read_bytes())
    assert w >= 1200 and h >= 600
    assert titles(ET.parse(tmp_path / "svg" / "working-set.svg").getroot())[0] == "Working set over time"


def test_run_writes_chart_files_with_title_and_period(tmp_path):
    prof = nightly_profile(tmp_path, ["svg"])
    res = CliRunner().invoke(app, ["run", str(prof), "--at", "2026-11-04T00:15"])
    assert res.exit_code == 0, res.output
    (svg,) = (tmp_path / "out").glob("*/*/charts/token-mix-over-time.svg")
    shown = titles(ET.parse(svg).getroot())
    assert "Token mix per hour" in shown
    assert any(t.startswith("Nightly · ") and "2026-11-03 00:00 → 2026-11-04 00:00 UTC" in t for t in shown), shown


@pytest.mark.parametrize("out", [None, "charts.png"])
def test_image_formats_need_an_out_folder(week_db, tmp_path, out):
    args = ["report", "--db", str(week_db), "--format", "png"] + (["--out", str(tmp_path / out)] if out else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "--out must name a folder" in res.output
    assert list(tmp_path.iterdir()) == []


# -- the page in a browser ------------------------------------------------------------------------

# Runs in the page after its charts are drawn and writes what a reader would see into #measure.
MEASURE = """<script>
(function () {
  function measure() {
    var st = document.getElementById("kvtrace-status");
    if (st.getAttribute("data-done") !== "1") { setTimeout(measure, 50); return; }
    var out = {width: document.documentElement.clientWidth, wrapped: [], charts: {}};
    document.querySelectorAll("td, th").forEach(function (c) {
      var r = document.createRange(); r.selectNodeContents(c);
      var tops = {};
      Array.prototype.forEach.call(r.getClientRects(), function (x) { tops[Math.round(x.top)] = 1; });
      if (Object.keys(tops).length > 1) { out.wrapped.push(c.textContent); }
    });
    document.querySelectorAll("[data-chart]").forEach(function (n) {
      var svg = n.querySelector("svg"), fig = n.closest("figure"), box = svg ? svg.getBoundingClientRect() : null;
      var lines = [];
      n.querySelectorAll("g.mark-line.role-mark path").forEach(function (p) {
        lines.push([p.getAttribute("stroke"), p.getAttribute("stroke-dasharray") || "",
                    p.getAttribute("stroke-width") || ""]);
      });
      var axes = [];
      n.querySelectorAll("g[aria-roledescription=axis]").forEach(function (a) {
        var labels = [];
        a.querySelectorAll("g.role-axis-label text").forEach(function (t) { labels.push(t.textContent); });
        axes.push({label: a.getAttribute("aria-label"), labels: labels});
      });
      out.charts[n.getAttribute("data-chart")] = {
        heading: fig.querySelector("h3").textContent, caption: fig.querySelector("figcaption").textContent,
        right: box ? box.right : 0, marks: n.querySelectorAll("g.role-mark > *").length,
        lines: lines, axes: axes};
    });
    var el = document.createElement("pre"); el.id = "measure"; el.textContent = JSON.stringify(out);
    document.body.appendChild(el);
  }
  measure();
})();
</script>"""


@pytest.mark.slow
def test_sample_week_page_in_headless_chromium(week, tmp_path):
    chromium = require_tool("chromium")
    page = tmp_path / "report.html"
    head, tail = render_html(week).rsplit("</body>", 1)
    page.write_text(head + MEASURE + "</body>" + tail, encoding="utf-8")
    dom = dump_dom(chromium, page, tmp_path / "profile", extra=["--window-size=1400,3000"])
    status = re.search(r'<div id="kvtrace-status"([^>]*)>(.*?)</div>', dom, re.S)
    assert 'data-errors="0"' in status.group(1) and 'data-warnings="0"' in status.group(1), status.group(2)
    m = json.loads(
        re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
        .group(1)
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", '"')
    )
    assert m["width"] >= 1380
    specs = build_charts(week)
    assert sorted(m["charts"]) == sorted(c.id for c in specs) and len(specs) == 7
    for c in specs:
        got = m["charts"][c.id]
        assert got["heading"] == c.title and got["caption"] == c.caption, c.id
        assert got["marks"] > 0, f"{c.id}: nothing drawn"
        assert 0 < got["right"] <= m["width"], f"{c.id} runs off the page"
        shown = [a for a in got["axes"] if a["label"]]
        assert shown and all("titled" in a["label"] for a in shown), f"{c.id}: an axis without a title"
        # Series drawn as lines: no two share colour and dash, and none hides under a twin.
        styles = [tuple(x) for x in got["lines"]]
        assert len(set(styles)) == len(styles), f"{c.id}: two series drawn alike {styles}"
        assert len({s[1] for s in styles}) == len(styles) or len({s[0] for s in styles}) == len(styles)
    assert len(m["charts"]["miss-ratio-curves"]["lines"]) == 3
    (time_axis,) = [a for a in m["charts"]["working-set"]["axes"] if "X-axis" in (a["label"] or "")]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d\d\d:\d\d", lab) for lab in time_axis["labels"]), time_axis
    (ttft_axis,) = [a for a in m["charts"]["ttft"]["axes"] if "X-axis" in (a["label"] or "")]
    assert "100m" not in ttft_axis["labels"] and all(re.search(r"(µs|ms|s)$", x) for x in ttft_axis["labels"])
    assert m["wrapped"] == [], f"table cells wrapped at 1,400 px: {m['wrapped'][:5]}"
