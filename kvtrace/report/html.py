"""The HTML report: one self-contained page (charts drawn by Vega, inlined), and PNG/SVG copies.

The page formats ``Report.data`` and never recomputes it: tables use the same helpers as the
Markdown and terminal renderers, charts come from :mod:`kvtrace.report.charts`. Vega, Vega-Lite
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

from kvtrace.report.render import (TTL_HEADERS, fmt_bytes, fmt_duration, fmt_int, fmt_pct, fmt_tokens, mix_rows,
                                   ttl_rows, window_text)

IMAGE_FORMATS = ("png", "svg")
PNG_SCALE = 2.0   # pixels per CSS pixel: sharp in chat and on high-density screens


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

    from kvtrace.report.charts import vl_version

    cached = _cache_dir() / f"vega-bundle-{getattr(vlc, '__version__', 'x')}-vl{vl_version() or 'default'}.js"
    try:
        text = cached.read_text(encoding="utf-8")
        if "window.vegaEmbed" in text:
            return text
    except OSError:
        pass
    text = vlc.javascript_bundle(vl_version=vl_version())
    try:
        from kvtrace.report.files import write_atomic

        write_atomic(cached, text.encode("utf-8"))
    except OSError:
        pass
    return text


def _lib_versions() -> str:
    import vl_convert as vlc

    from kvtrace.report.charts import vl_version

    return (f"Vega {vlc.get_vega_version()}, Vega-Lite {vl_version() or 'latest'}, "
            f"vega-embed {vlc.get_vega_embed_version()}")


# -- tables ---------------------------------------------------------------------------------------

def _table(headers, rows, foot=None) -> str:
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>")
    out.append("</tbody>")
    if foot:
        out.append("<tfoot><tr>" + "".join(f"<td>{_e(c)}</td>" for c in foot) + "</tr></tfoot>")
    out.append("</table>")
    return "".join(out)


def _cards(d: dict) -> str:
    mix = d["token_mix"]
    items = [("Requests", fmt_int(d["requests"])), ("Sessions", fmt_int(d["sessions"])),
             ("Tokens", fmt_tokens(mix["total"])), ("Cache hit ratio (tokens)", fmt_pct(mix["cache_hit_ratio"]))]
    return '<ul class="cards">' + "".join(
        f'<li><span class="label">{_e(k)}</span><span class="value">{_e(v)}</span></li>' for k, v in items) + "</ul>"


def _shares_line(mix: dict) -> str:
    """The seed study's four-way split: reads / creation (all write TTLs) / output / uncached input."""
    s = mix["shares"]
    parts = [("Cache read", s["cache_read"]),
             ("Cache creation", s["cache_write_5m"] + s["cache_write_1h"] + s["cache_write_unknown"]),
             ("Output", s["output"]), ("Uncached input", s["input_uncached"])]
    return '<p class="shares">' + " · ".join(f"{_e(k)} <b>{_e(fmt_pct(v))}</b>" for k, v in parts) + "</p>"


def _group_table(g: str, entries: list[dict]) -> str:
    rows = []
    for e in entries:
        m = e["token_mix"]
        writes = m["cache_write_5m"] + m["cache_write_1h"] + m["cache_write_unknown"]
        rows.append((e["key"], fmt_int(e["requests"]), fmt_int(m["total"]), fmt_pct(m["shares"]["cache_read"]),
                     fmt_int(writes), fmt_int(m["output"]), fmt_pct(m["cache_hit_ratio"])))
    return _table((g, "Requests", "Total tokens", "Read share", "Cache write", "Output", "Hit ratio"), rows)


def _tier_table(tiers: list[dict]) -> str:
    def mbps(v):
        return "–" if v is None else f"{v / 1e6:,.1f}"

    rows = [(t.get("name", "tier"), fmt_tokens(t.get("capacity_tokens")), fmt_bytes(t.get("capacity_bytes")),
             fmt_pct(t.get("hit_ratio_tokens")), mbps(t.get("write_bytes_per_s_mean")),
             mbps(t.get("write_bytes_per_s_peak")),
             "–" if t.get("dwpd_per_drive") is None else f"{t['dwpd_per_drive']:.2f}",
             "–" if t.get("dwpd_rating") is None else f"{t['dwpd_rating']:g}", t.get("fills_at") or "–")
            for t in tiers]
    return _table(("Tier", "Capacity (tokens)", "Capacity", "Hit ratio (tokens)", "Writes mean (MB/s)",
                   "Writes peak (MB/s)", "DWPD per drive", "Drive rating", "First fills"), rows)


def _ttft_table(ttft: dict) -> str:
    def ms(q, k):
        return "–" if not q or q.get(k) is None else f"{q[k]:,.1f}"

    rows = []
    for key, label in (("all", "All requests"), ("continuing", "Continuing"), ("resumed", "Resumed after idle"),
                       ("new", "New session")):
        q = ttft.get(key)
        if q:
            nc = q.get("no_cache")
            rows.append((label, fmt_int(q.get("count")), *(ms(q, k) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")),
                         ms(nc, "p50_ms"), ms(nc, "p99_ms")))
    if not rows:
        return ""
    out = _table(("Session", "Requests", "p50 (ms)", "p90 (ms)", "p99 (ms)", "max (ms)", "p50 without cache (ms)",
                  "p99 without cache (ms)"), rows)
    if ttft.get("gpu_seconds_avoided"):
        avoided = ", ".join(f"{k} {v:,.0f}" for k, v in ttft["gpu_seconds_avoided"].items())
        out += f"<p>GPU-seconds of prefill avoided per tier: {_e(avoided)}.</p>"
    return out


def _tiers_intro(t: dict) -> str:
    bits = [f"Tier set <b>{_e(t['name'])}</b>" if t.get("name") else "Tier replay"]
    if t.get("description"):
        bits.append(f"({_e(t['description'])})")
    if t.get("mode"):
        bits.append(f"· {_e(t['mode'])} mode")
    bits.append(f"· idle TTL {_e(fmt_duration(t['ttl_s']) if t.get('ttl_s') else 'none')}")
    if t.get("hit_ratio_tokens") is not None:
        bits.append(f"· hit ratio through the tiers <b>{_e(fmt_pct(t['hit_ratio_tokens']))}</b>")
    if t.get("miss_tokens") is not None:
        bits.append(f"· {_e(fmt_tokens(t['miss_tokens']))} tokens re-prefilled")
    return "<p>" + " ".join(bits) + ".</p>"


def _assumptions(items: list) -> str:
    if not items:
        return ""
    return ("<details><summary>Assumptions of the replay</summary><ul>"
            + "".join(f"<li>{_e(a)}</li>" for a in items) + "</ul></details>")


def _usd(v) -> str:
    return "–" if v is None else f"${v:,.2f}"


def _spend_block(spend: dict) -> str:
    rows = [(f"{fmt_duration(t['ttl_s'])} TTL", f"×{t['write_multiplier']:g}", fmt_int(t["read_tokens"]),
             fmt_int(t["write_tokens"]), fmt_int(t["input_tokens"]), fmt_int(t["output_tokens"]), _usd(t["spend_usd"]))
            for t in spend.get("ttl") or []]
    obs = spend.get("observed")
    if obs:
        rows.append(("As observed", "", fmt_int(obs.get("read_tokens")), fmt_int(obs.get("write_tokens")), "", "",
                     _usd(obs.get("spend_usd"))))
    out = [_table(("Scenario", "Cache write price", "Cache read tokens", "Cache write tokens", "Uncached input",
                   "Output", "Spend"), rows)]
    if spend.get("net_difference_usd") is not None:
        diff = spend["net_difference_usd"]
        out.append(f"<p>1 h TTL minus 5 min TTL: <b>{_e(('+' if diff >= 0 else '−') + _usd(abs(diff)))}</b> "
                   f"({_e(spend.get('cheaper', '?'))} is cheaper); "
                   f"{_e(fmt_int(spend.get('writes_that_would_be_reads')))} tokens written under 5 min would be "
                   "cache reads under 1 h.</p>")
    if spend.get("unpriced"):
        names = ", ".join(str(u.get("model")) for u in spend["unpriced"])
        out.append(f"<p>Not priced (no entry in the price table): {_e(names)}.</p>")
    return "".join(out)


def _reuse_table(reuse: dict) -> str:
    def dur(v):
        if v is None:
            return "–"
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if v >= 1.5 * size:
                return f"{v / size:.3g} {unit}"
        return f"{v:.3g} s"

    rows = []
    for key, label in (("reuse_time", "Block age"), ("effective_reuse_time", "Effective")):
        r = reuse.get(key)
        if not r:
            continue
        w, q, c = r.get("within", {}), r.get("quantiles_s", {}), r.get("ttl_for_share_s", {})
        rows.append((label, *(fmt_pct(w.get(k)) for k in ("1m", "5m", "1h")),
                     *(dur(q.get(k)) for k in ("p50", "p90", "p99")),
                     *(dur(c.get(k)) for k in ("0.9", "0.95", "0.99"))))
    if not rows:
        return ""
    return _table(("Reuse time", "Within 1 min", "Within 5 min", "Within 1 h", "p50", "p90", "p99",
                   "TTL for 90% of reuse", "95%", "99%"), rows)


# -- page -----------------------------------------------------------------------------------------

def _figure(chart) -> str:
    spec = json.dumps(chart.spec, separators=(",", ":")).replace("<", "\\u003c")  # no "</script>" inside
    return (f'<figure id="chart-{_e(chart.id)}"><h3>{_e(chart.title)}</h3>'
            f'<div class="chart" data-chart="{_e(chart.id)}"></div>'
            f"<figcaption>{_e(chart.caption)}</figcaption>"
            f'<script type="application/json" id="spec-{_e(chart.id)}">{spec}</script></figure>')


def _body(d: dict, charts: dict) -> str:
    def fig(cid):
        return _figure(charts[cid]) if cid in charts else ""

    mix = d["token_mix"]
    if not d["requests"]:
        return _cards(d) + "\n<p>No requests in this window.</p>"
    out = [_cards(d), "<h2>Token mix</h2>", _shares_line(mix),
           _table(("Class", "Tokens", "Share"), mix_rows(mix), ("Total", fmt_int(mix["total"]), "100%")),
           fig("token-mix-over-time")]
    reuse = d.get("reuse")
    if reuse:
        out += ["<h2>Context reuse</h2>", fig("reuse-time-cdf"), _reuse_table(reuse)]
    if d.get("ttl"):
        out += ["<h2>TTL what-if and required capacity</h2>",
                "<p>Unlimited capacity; an idle TTL is refreshed on every use.</p>",
                _table(TTL_HEADERS, ttl_rows(d)), fig("working-set")]
    tiers = d.get("tiers")
    if tiers:
        out += ["<h2>Tiers</h2>", _tiers_intro(tiers)]
        if tiers.get("tiers"):
            out.append(_tier_table(tiers["tiers"]))
        out += [fig("miss-ratio-curves"), fig("writes-dwpd")]
        if tiers.get("ttft"):
            out += [fig("ttft"), _ttft_table(tiers["ttft"])]
        out.append(_assumptions(tiers.get("assumptions")))
    spend = d.get("spend")
    if spend and spend.get("ttl"):
        out += ["<h2>API spend by cache TTL</h2>", fig("spend"), _spend_block(spend)]
    for g, entries in (d.get("groups") or {}).items():
        out += [f"<h2>By {_e(g)}</h2>", _group_table(g, entries)]
    return "\n".join(x for x in out if x)


def render_html(d: dict, charts: list | None = None) -> str:
    """The report page for ``d`` (``Report.data``) as one self-contained HTML string.

    Args:
        d: the report dict.
        charts: chart specs already built from ``d`` (``kvtrace run`` reuses them for images).
    """
    from kvtrace.report.charts import build_charts

    charts = build_charts(d) if charts is None else charts
    by_id = {c.id: c for c in charts}
    footer = (f"{d.get('generator', 'kvtrace')} · report schema {d.get('schema_version')} · generated "
              f"{d.get('generated_at')} · charts drawn in this page by {_lib_versions()}, inlined (no network needed)")
    return _template().substitute(
        title=_e(d["title"]), generator=_e(d.get("generator", "kvtrace")),
        window_line=_e(f"Window (UTC): {window_text(d)}"), bundle=js_bundle(),
        body=_body(d, by_id), footer=_e(footer), n_charts=len(charts))


def export_images(d_or_charts, folder: str | Path, formats=IMAGE_FORMATS, scale: float = PNG_SCALE) -> list[Path]:
    """Write each chart as ``<folder>/<chart id>.png`` / ``.svg`` (vl-convert, no browser).

    Args:
        d_or_charts: the report dict, or chart specs built from it.
        folder: created if missing.
        formats: any of ``png`` and ``svg``.
        scale: PNG pixels per chart pixel.

    Returns:
        The files written.
    """
    import vl_convert as vlc

    from kvtrace.report.charts import build_charts, vl_version
    from kvtrace.report.files import write_atomic

    charts = build_charts(d_or_charts) if isinstance(d_or_charts, dict) else d_or_charts
    folder = Path(folder)
    written = []
    for c in charts:
        if "png" in formats:
            png = vlc.vegalite_to_png(c.spec, vl_version=vl_version(), scale=scale)
            written.append(write_atomic(folder / f"{c.id}.png", png))
        if "svg" in formats:
            svg = vlc.vegalite_to_svg(c.spec, vl_version=vl_version())
            written.append(write_atomic(folder / f"{c.id}.svg", svg.encode()))
    return written
