"""The HTML report: one self-contained page (charts drawn by Vega, inlined), and PNG/SVG copies.

The page formats ``Report.data`` and never recomputes it: it walks the sections of
:mod:`kvtrace.report.registry` (heading, charts, tables, details), with the same tables as the
Markdown and terminal renderers and the charts of :mod:`kvtrace.report.charts`. Vega, Vega-Lite
and vega-embed come from the JavaScript bundle that ``vl-convert-python`` ships (an installed
package, nothing fetched), so the page opens on a closed network; its Content-Security-Policy
forbids every load, so a page that tried would fail visibly rather than silently depend on one.
"""

from __future__ import annotations

import functools
import html
import json
import os
from importlib import resources
from pathlib import Path
from string import Template

from kvtrace.units import fmt_int, fmt_pct, fmt_tokens, fmt_usd
from kvtrace.report.charts import vl_version
from kvtrace.report.files import write_atomic
from kvtrace.report import registry
from kvtrace.report.render import window_text

IMAGE_FORMATS = ("png", "svg")
PNG_SCALE = 2.0  # pixels per CSS pixel: sharp in chat and on high-density screens


def _e(x) -> str:
    return html.escape(str(x), quote=True)


@functools.cache
def _template() -> Template:
    return Template((resources.files("kvtrace.report") / "templates" / "report.html").read_text(encoding="utf-8"))


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvtrace"


@functools.cache
def js_bundle() -> str:
    """Vega, Vega-Lite (the version Altair writes) and vega-embed as one script, from vl-convert.

    Bundling starts vl-convert's JavaScript runtime (2-4 s), so the result is kept in the user's
    cache folder, keyed by the vl-convert and Vega-Lite versions; an unwritable cache is skipped.
    """
    import vl_convert as vlc

    cached = _cache_dir() / f"vega-bundle-{getattr(vlc, '__version__', 'x')}-vl{vl_version() or 'default'}.js"
    try:
        text = cached.read_text(encoding="utf-8")
        if "window.vegaEmbed" in text:
            return text
    except OSError:
        pass
    text = vlc.javascript_bundle(vl_version=vl_version())
    try:
        write_atomic(cached, text.encode("utf-8"))
    except OSError:
        pass
    return text


def _lib_versions() -> str:
    import vl_convert as vlc

    return (
        f"Vega {vlc.get_vega_version()}, Vega-Lite {vl_version() or 'latest'}, "
        f"vega-embed {vlc.get_vega_embed_version()}"
    )


# -- tables ---------------------------------------------------------------------------------------


def _table(spec) -> str:
    """A :class:`~kvtrace.report.tables.TableSpec` as an HTML table with its notes."""
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in spec.headers), "</tr></thead><tbody>"]
    for r in spec.rows:
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>")
    out.append("</tbody>")
    if spec.foot:
        out.append("<tfoot><tr>" + "".join(f"<td>{_e(c)}</td>" for c in spec.foot) + "</tr></tfoot>")
    out.append("</table>")
    out.extend(f"<p>{_e(n)}</p>" for n in spec.notes)
    return "".join(out)


def _cards(d: dict) -> str:
    mix = d["token_mix"]
    items = [
        ("Requests", fmt_int(d["requests"])),
        ("Sessions", fmt_int(d["sessions"])),
        ("Tokens", fmt_tokens(mix["total"])),
        ("Cache hit ratio (tokens)", fmt_pct(mix["cache_hit_ratio"])),
    ]
    if (d.get("cost") or {}).get("cost_usd") is not None:
        items.append(("Cost (list prices)", fmt_usd(d["cost"]["cost_usd"])))
    return (
        '<ul class="cards">'
        + "".join(f'<li><span class="label">{_e(k)}</span><span class="value">{_e(v)}</span></li>' for k, v in items)
        + "</ul>"
    )


def _details(summary: str, items: list) -> str:
    if not items:
        return ""
    return (
        f"<details><summary>{_e(summary)}</summary><ul>"
        + "".join(f"<li>{_e(a)}</li>" for a in items)
        + "</ul></details>"
    )


# -- page -----------------------------------------------------------------------------------------


def _figure(chart) -> str:
    spec = json.dumps(chart.spec, separators=(",", ":")).replace("<", "\\u003c")  # no "</script>" inside
    return (
        f'<figure id="chart-{_e(chart.id)}"><h3>{_e(chart.title)}</h3>'
        f'<div class="chart" data-chart="{_e(chart.id)}"></div>'
        f"<figcaption>{_e(chart.caption)}</figcaption>"
        f'<script type="application/json" id="spec-{_e(chart.id)}">{spec}</script></figure>'
    )


def _body(d: dict, charts: dict) -> str:
    """The page between header and footer: the cards, then each section of the registry that has
    tables or charts, under its title (the first table is titled by it, later ones by their own;
    a section without a title has none, and each table its own), with its charts before or after
    its tables, then its warnings, and its details last. ``charts``: chart id -> ChartSpec, built from ``d``."""
    if d.get("no_data"):
        return f'<p class="no-data">{_e(d["no_data"])}</p>'
    out = [_cards(d)]
    for section in registry.SECTIONS:
        specs = registry.section_tables(section, d)
        tables = [
            (f"<h3>{_e(t.title)}</h3>" if i or not section.title else "") + _table(t) for i, t in enumerate(specs)
        ]
        figs = [_figure(c) for c in charts.values() if c.section == section.key]
        warns = section.warnings(d)
        if not tables and not figs and not warns:
            continue
        if section.title:
            out.append(f"<h2>{_e(section.title)}</h2>")
        out += figs + tables if section.charts_first else tables + figs
        if warns:
            out.append(
                '<ul class="warnings">'
                + "".join(f"<li><strong>Warning:</strong> {_e(w)}</li>" for w in warns)
                + "</ul>"
            )
        if section.details:
            summary, items = section.details
            out.append(_details(summary, items(d)))
    return "\n".join(x for x in out if x)


def render_html(d: dict, charts: list | None = None) -> str:
    """The report page for ``d`` (``Report.data``) as one self-contained HTML string.

    Args:
        d: the report dict.
        charts: chart specs already built from ``d`` (``kvtrace run`` reuses them for images).
    """
    charts = registry.build_charts(d) if charts is None else charts
    by_id = {c.id: c for c in charts}
    footer = (
        f"{d.get('generator', 'kvtrace')} · report schema {d.get('schema_version')} · generated "
        f"{d.get('generated_at')} · charts drawn in this page by {_lib_versions()}, inlined (no network needed)"
    )
    return _template().substitute(
        title=_e(d["title"]),
        generator=_e(d.get("generator", "kvtrace")),
        window_line=_e(f"Window (UTC): {window_text(d)}"),
        bundle=js_bundle(),
        body=_body(d, by_id),
        footer=_e(footer),
        n_charts=len(charts),
    )


def period_text(d: dict) -> str:
    """The report's title and period for a chart copied out of the page: ``Fleet · 2026-W10 ·
    2026-03-02 00:00 → 2026-03-09 00:00 UTC`` (the requested window, else first to last request)."""
    w = d.get("window") or {}
    since, until = w.get("since") or w.get("first_request"), w.get("until") or w.get("last_request")

    def short(t):
        return str(t).replace("T", " ").replace("Z", "")[:16] if t else "–"

    title = d.get("title", "kvtrace report")
    return f"{title} · {short(since)} → {short(until)} UTC" if since or until else title


def titled(chart, d: dict) -> dict:
    """The chart's spec with its title and the report's period drawn in (a PNG or SVG stands alone;
    on the page the heading above each chart says the same)."""
    spec = dict(chart.spec)
    spec["title"] = {
        "text": chart.title,
        "subtitle": period_text(d),
        "anchor": "start",
        "fontSize": 17,
        "subtitleFontSize": 12,
        "subtitleColor": "#555",
        "offset": 12,
    }
    return spec


def export_images(
    d: dict, folder: str | Path, formats=IMAGE_FORMATS, scale: float = PNG_SCALE, charts: list | None = None
) -> list[Path]:
    """Write each chart as ``<folder>/<chart id>.png`` / ``.svg`` (vl-convert, no browser), each
    with its title and the report's title and period above it.

    Args:
        d: the report dict.
        folder: created if missing.
        formats: any of ``png`` and ``svg``.
        scale: PNG pixels per chart pixel.
        charts: chart specs already built from ``d`` (built here if not given).

    Returns:
        The files written.
    """
    import vl_convert as vlc

    charts = registry.build_charts(d) if charts is None else charts
    folder = Path(folder)
    written = []
    for c in charts:
        spec = titled(c, d)
        if "png" in formats:
            png = vlc.vegalite_to_png(spec, vl_version=vl_version(), scale=scale)
            written.append(write_atomic(folder / f"{c.id}.png", png))
        if "svg" in formats:
            svg = vlc.vegalite_to_svg(spec, vl_version=vl_version())
            written.append(write_atomic(folder / f"{c.id}.svg", svg.encode()))
    return written
