"""Chart specs (Vega-Lite, built with Altair) from the report dict: reshaping only, no analysis.

Each builder reads one part of ``Report.data`` (keys in ``docs/report-schema.md``) and returns a
:class:`ChartSpec`, or ``None`` when the report lacks that data, so a chart appears exactly when
its data exists. The HTML page embeds the specs; :mod:`kvtrace.report.html` also renders PNG and
SVG copies through vl-convert. Colours are the Okabe–Ito palette (safe for the common kinds of
colour blindness) and every axis title carries its unit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kvtrace.units import fmt_tokens, fmt_ttl
from kvtrace.report.tables import CLASS_LABELS

# Okabe & Ito, "Color Universal Design" (2008): distinguishable with protanopia, deuteranopia, tritanopia.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
CLASS_COLORS = {
    "cache_read": "#0072B2", "cache_write_5m": "#E69F00", "cache_write_1h": "#D55E00",
    "cache_write_unknown": "#CC79A7", "output": "#009E73", "input_uncached": "#56B4E9",
}
WIDTH, HEIGHT = 640, 260
FONT = "Liberation Sans, DejaVu Sans, Helvetica, Arial, sans-serif"
MARKS = ((300.0, "5 min"), (3600.0, "1 h"))   # TTLs marked on reuse-time charts


@dataclass
class ChartSpec:
    """One chart: a stable id (file names, DOM ids), a title, a caption and the Vega-Lite spec."""

    id: str
    title: str
    caption: str
    spec: dict


def _config(chart):
    # Large type and a white background: the charts are read printed and pasted into chat as PNG.
    return (chart.configure(font=FONT, background="white", padding=8)
            .configure_axis(labelFontSize=12, titleFontSize=13, gridColor="#e6e6e6")
            .configure_legend(labelFontSize=12, titleFontSize=12, orient="right")
            .configure_title(fontSize=15, anchor="start")
            .configure_range(category=OKABE_ITO)
            .configure_view(stroke=None))


def _spec(chart) -> dict:
    return _config(chart).to_dict()


def _utc_iso(key: str) -> str:
    """A day (``2026-11-02``) or hour (``2026-11-02T08:00``) key as an explicit UTC instant,
    so browsers in any time zone place it the same way."""
    return (key + "T00:00:00Z") if len(key) == 10 else (key + ":00Z" if len(key) == 16 else key)


def _ttl_label(ttl_s) -> str:
    return "no TTL" if ttl_s is None else fmt_ttl(float(ttl_s))


def _tier_depths(tiers: list[dict]) -> list[dict]:
    """Depth boundaries of the tiers in tokens: a tier's own ``depth_tokens`` if the replay gives it,
    else the running sum of capacities (tiers are depth bands of one LRU stack)."""
    out, depth = [], 0.0
    for t in tiers:
        cap = t.get("capacity_tokens")
        if cap is None:
            continue
        depth = t.get("depth_tokens", depth + cap)
        out.append({"tier": str(t.get("name", "tier")), "depth_tokens": depth})
    return out


# -- builders -------------------------------------------------------------------------------------

def token_mix_over_time(d: dict) -> ChartSpec | None:
    """Stacked token classes per hour or day, with a second panel without cache reads (which
    dominate agentic traffic and would flatten every other class)."""
    import altair as alt

    series = (d.get("series") or {}).get("token_mix") or {}
    entries, bucket = series.get("entries"), series.get("bucket")
    if not entries:
        for b in ("hour", "day"):
            if d.get("groups", {}).get(b):
                entries, bucket = d["groups"][b], b
                break
    entries = [e for e in entries or [] if e.get("key")]
    if not entries:
        return None
    rows = [{"t": _utc_iso(str(e["key"])), "class": CLASS_LABELS[k], "order": i, "tokens": e["token_mix"][k]}
            for e in entries for i, k in enumerate(CLASS_LABELS) if e["token_mix"][k]]
    unit = "utcyearmonthdatehours" if bucket == "hour" else "utcyearmonthdate"
    per = "hour" if bucket == "hour" else "day"
    labels = [CLASS_LABELS[k] for k in CLASS_LABELS]
    color = alt.Color("class:N", title="Token class", sort=labels,
                      scale=alt.Scale(domain=labels, range=[CLASS_COLORS[k] for k in CLASS_LABELS]))
    base = alt.Chart(alt.Data(values=rows)).encode(
        x=alt.X("t:T", timeUnit=unit, title=f"Time (UTC, per {per})"),
        color=color, order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("t:T", timeUnit=unit, title="Time (UTC)"), "class:N",
                 alt.Tooltip("tokens:Q", format=",")])
    mark = base.mark_area(opacity=0.9) if len(entries) >= 3 else base.mark_bar()
    top = mark.encode(y=alt.Y("sum(tokens):Q", stack="zero", title=f"Tokens per {per}",
                              axis=alt.Axis(format="~s"))
                      ).properties(width=WIDTH, height=HEIGHT, title="All token classes")
    rest = mark.transform_filter(alt.datum["class"] != CLASS_LABELS["cache_read"]).encode(
        y=alt.Y("sum(tokens):Q", stack="zero", title=f"Tokens per {per}", axis=alt.Axis(format="~s"))
    ).properties(width=WIDTH, height=HEIGHT * 0.7, title="Without cache reads")
    return ChartSpec("token-mix-over-time", f"Token mix per {per}",
                     "Tokens of each class per UTC " + per + "; the lower panel leaves out cache reads.",
                     _spec(alt.vconcat(top, rest).resolve_scale(y="independent")))


REUSE_KINDS = (("reuse_time", "Block age (since last use)"),
               ("effective_reuse_time", "Effective (prefix) reuse time"))


def reuse_time_cdf(d: dict) -> ChartSpec | None:
    """Token-weighted CDFs of reuse time (``reuse.reuse_time.cdf`` and the effective one), with the
    5 min and 1 h TTLs marked."""
    import altair as alt

    reuse = d.get("reuse") or {}
    rows = [{"s": float(p["t_s"]), "cdf": float(p["share_tokens"]), "kind": label}
            for key, label in REUSE_KINDS for p in (reuse.get(key) or {}).get("cdf") or [] if p.get("t_s")]
    if not rows:
        return None
    x_title = "Reuse time (seconds, log scale)"
    kinds = [label for _, label in REUSE_KINDS]
    line = alt.Chart(alt.Data(values=rows)).mark_line(point=True, strokeWidth=2.5).encode(
        x=alt.X("s:Q", scale=alt.Scale(type="log"), title=x_title),
        y=alt.Y("cdf:Q", scale=alt.Scale(domain=[0, 1]), title="Share of reused tokens (cumulative)",
                axis=alt.Axis(format="%")),
        color=alt.Color("kind:N", title="Reuse time", sort=kinds,
                        scale=alt.Scale(domain=kinds, range=[OKABE_ITO[0], OKABE_ITO[1]]),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=400)),
        strokeDash=alt.StrokeDash("kind:N", sort=kinds, legend=None),
        tooltip=["kind:N", alt.Tooltip("s:Q", title="Reuse time (s)", format=",.0f"),
                 alt.Tooltip("cdf:Q", title="Cumulative share", format=".2%")])
    marks = [{"s": s, "label": label} for s, label in MARKS]
    rules = alt.Chart(alt.Data(values=marks)).mark_rule(color=OKABE_ITO[5], strokeDash=[6, 4]).encode(
        x=alt.X("s:Q", title=x_title))
    # Labels sit above the plot area, where no data can hide them.
    text = alt.Chart(alt.Data(values=marks)).mark_text(align="center", dy=-4, color=OKABE_ITO[5],
                                                       fontSize=12, baseline="bottom").encode(
        x=alt.X("s:Q", title=x_title), y=alt.value(0), text="label:N")
    chart = alt.layer(line, rules, text).properties(width=WIDTH, height=HEIGHT)
    return ChartSpec("reuse-time-cdf", "Reuse time",
                     "Share of reused prompt tokens whose reuse time is at most the given time; dashed "
                     "lines: the 5 min and 1 h cache TTLs. Effective reuse time is the largest block age "
                     "along the prefix up to the block, since a prefix cache serves a block only if it "
                     "serves every block before it.", _spec(chart))


def miss_ratio_curves(d: dict) -> ChartSpec | None:
    """Hit ratio (tokens) against cache capacity for each TTL, tier boundaries marked."""
    import altair as alt

    tiers = d.get("tiers") or {}
    grid = [g for g in tiers.get("grid") or [] if g.get("capacity_tokens")]
    if not grid:
        return None
    rows = [{"cap": float(g["capacity_tokens"]), "hit": float(g["hit_ratio_tokens"]),
             "ttl": _ttl_label(g.get("ttl_s")), "ttl_s": g.get("ttl_s") if g.get("ttl_s") is not None else 1e18}
            for g in grid]
    order = [lbl for _, lbl in sorted({(r["ttl_s"], r["ttl"]) for r in rows})]
    x_title = "Cache capacity (tokens, log scale)"
    lines = alt.Chart(alt.Data(values=rows)).mark_line(point=True, strokeWidth=2).encode(
        x=alt.X("cap:Q", scale=alt.Scale(type="log"), title=x_title,
                axis=alt.Axis(format="~s")),
        y=alt.Y("hit:Q", scale=alt.Scale(domain=[0, 1]), title="Hit ratio (share of prompt tokens)",
                axis=alt.Axis(format="%")),
        color=alt.Color("ttl:N", title="Idle TTL", sort=order),
        strokeDash=alt.StrokeDash("ttl:N", sort=order, legend=None),
        tooltip=["ttl:N", alt.Tooltip("cap:Q", title="Capacity (tokens)", format=",.0f"),
                 alt.Tooltip("hit:Q", title="Hit ratio", format=".2%")])
    layers = [lines]
    depths = _tier_depths(tiers.get("tiers") or [])
    if depths:
        layers.append(alt.Chart(alt.Data(values=depths)).mark_rule(color="#555", strokeDash=[2, 3]).encode(
            x=alt.X("depth_tokens:Q", title=x_title),
            tooltip=["tier:N", alt.Tooltip("depth_tokens:Q", format=",.0f", title="Tier ends at (tokens)")]))
        layers.append(alt.Chart(alt.Data(values=depths)).mark_text(angle=270, align="right", dx=-4, dy=-5,
                                                                   fontSize=11, color="#333").encode(
            x=alt.X("depth_tokens:Q", title=x_title), y=alt.value(4), text="tier:N"))
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    return ChartSpec("miss-ratio-curves", "Hit ratio against capacity",
                     "LRU hit ratio (token-weighted) at each cache capacity, one line per idle TTL; "
                     "dotted lines: where each tier ends in the LRU stack.", _spec(chart))


def working_set_over_time(d: dict) -> ChartSpec | None:
    """Working set (tokens held under each TTL) over time, against the tier boundaries."""
    import altair as alt

    from datetime import datetime, timedelta

    rows = []
    peak = 0.0
    for e in d.get("ttl") or []:
        series = (e.get("working_set") or {}).get("series") or {}
        if not series.get("max_tokens"):
            continue
        # The series is compact (start, step, values); each value is its bucket's maximum.
        t0 = datetime.fromisoformat(series["t0"].replace("Z", "+00:00"))
        for i, v in enumerate(series["max_tokens"]):
            t = (t0 + timedelta(seconds=i * float(series["step_s"]))).isoformat().replace("+00:00", "Z")
            rows.append({"t": t, "tokens": float(v), "ttl": _ttl_label(e.get("ttl_s"))})
            peak = max(peak, float(v))
    if not rows:
        return None
    order = [_ttl_label(e.get("ttl_s")) for e in d.get("ttl") or []]
    depths = _tier_depths((d.get("tiers") or {}).get("tiers") or [])
    # Boundaries far above the peak would flatten the lines: name them in the caption instead.
    shown = [t for t in depths if t["depth_tokens"] <= 3 * peak]
    hidden = [t for t in depths if t["depth_tokens"] > 3 * peak]
    top = max([peak] + [t["depth_tokens"] for t in shown]) * 1.08 or 1.0
    y_title = "Working set (tokens)"
    lines = alt.Chart(alt.Data(values=rows)).mark_line(strokeWidth=2, interpolate="step-after").encode(
        x=alt.X("t:T", scale=alt.Scale(type="utc"), title="Time (UTC)"),
        y=alt.Y("tokens:Q", scale=alt.Scale(domain=[0, top]), title=y_title,
                axis=alt.Axis(format="~s")),
        color=alt.Color("ttl:N", title="Idle TTL", sort=order),
        tooltip=[alt.Tooltip("t:T", title="Time (UTC)", format="%Y-%m-%d %H:%M"), "ttl:N",
                 alt.Tooltip("tokens:Q", format=",.0f")])
    layers = [lines]
    if shown:
        layers.append(alt.Chart(alt.Data(values=shown)).mark_rule(color="#555", strokeDash=[2, 3]).encode(
            y=alt.Y("depth_tokens:Q", title=y_title),
            tooltip=["tier:N", alt.Tooltip("depth_tokens:Q", format=",.0f", title="Tier ends at (tokens)")]))
        layers.append(alt.Chart(alt.Data(values=shown)).mark_text(align="left", dx=4, dy=-7, fontSize=11,
                                                                  color="#333").encode(
            y=alt.Y("depth_tokens:Q", title=y_title), x=alt.value(0), text="tier:N"))
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    caption = ("Tokens that an idle TTL keeps cached (the maximum of each time bucket), with unlimited "
               "capacity; dotted lines: tier boundaries (a tier fills when a line crosses its boundary).")
    if hidden:
        caption += " Beyond the peak working set: " + ", ".join(
            f"{t['tier']} ends at {fmt_tokens(t['depth_tokens'])} tokens" for t in hidden) + "."
    return ChartSpec("working-set", "Working set over time", caption, _spec(chart))


TTFT_QUANTILES = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("max_ms", "max"))
TTFT_COHORTS = (("continuing", "Continuing"), ("resumed", "Resumed after idle"), ("new", "New session"))


def ttft_distributions(d: dict) -> ChartSpec | None:
    """Modelled time to first token per session cohort: CDFs when the replay gives them
    (``cdf_ms`` at ``cdf_quantiles``), else the p50/p90/p99/max quantiles."""
    import altair as alt

    ttft = (d.get("tiers") or {}).get("ttft") or {}
    x_title = "Time to first token (ms, log scale)"
    x_axis = alt.Axis(format="~s", labelOverlap="greedy")
    levels = ttft.get("cdf_quantiles") or []
    rows = []
    for key, label in TTFT_COHORTS:
        c = ttft.get(key) or {}
        if c.get("count") == 0:
            continue
        for q, ms in zip(levels, c.get("cdf_ms") or []):
            if ms and ms > 0:
                rows.append({"cohort": label, "ms": float(ms), "share": float(q)})
    order = [label for _, label in TTFT_COHORTS]
    caption = ("Modelled TTFT: reload of cached KV from each tier at its bandwidth plus re-prefill of "
               "missed tokens. Resumed sessions come back after an idle gap.")
    if rows:
        chart = alt.Chart(alt.Data(values=rows)).mark_line(strokeWidth=2.5, interpolate="monotone").encode(
            x=alt.X("ms:Q", scale=alt.Scale(type="log"), title=x_title, axis=x_axis),
            y=alt.Y("share:Q", scale=alt.Scale(domain=[0, 1]), title="Share of requests (cumulative)",
                    axis=alt.Axis(format="%")),
            color=alt.Color("cohort:N", title="Session", sort=order),
            strokeDash=alt.StrokeDash("cohort:N", sort=order, legend=None),
            tooltip=["cohort:N", alt.Tooltip("ms:Q", format=",.1f", title="TTFT (ms)"),
                     alt.Tooltip("share:Q", format=".1%", title="Share at or below")]
        ).properties(width=WIDTH, height=HEIGHT)
        return ChartSpec("ttft", "Time to first token", caption, _spec(chart))
    for key, label in TTFT_COHORTS:
        q = ttft.get(key) or {}
        for k, name in TTFT_QUANTILES:
            if q.get(k) is not None and q[k] > 0:
                rows.append({"cohort": label, "q": name, "ms": float(q[k])})
    if not rows:
        return None
    qs = [name for _, name in TTFT_QUANTILES]
    base = alt.Chart(alt.Data(values=rows)).encode(
        x=alt.X("ms:Q", scale=alt.Scale(type="log"), title=x_title, axis=x_axis),
        y=alt.Y("cohort:N", title="Session", sort=order))
    rule = base.mark_rule(color="#999", strokeWidth=2).encode(x=alt.X("min(ms):Q", title=x_title), x2="max(ms):Q")
    dots = base.mark_point(size=120, filled=True).encode(
        color=alt.Color("q:N", title="Quantile", sort=qs), shape=alt.Shape("q:N", title="Quantile", sort=qs),
        tooltip=["cohort:N", "q:N", alt.Tooltip("ms:Q", format=",.0f")])
    chart = alt.layer(rule, dots).properties(width=WIDTH, height=40 * len({r["cohort"] for r in rows}) + 40)
    return ChartSpec("ttft", "Time to first token", caption, _spec(chart))


def writes_and_dwpd(d: dict) -> ChartSpec | None:
    """Write rate per tier and DWPD per drive against the drive rating."""
    import altair as alt

    tiers = [t for t in (d.get("tiers") or {}).get("tiers") or [] if t.get("write_bytes_per_s_mean") is not None]
    if not tiers:
        return None
    names = [str(t.get("name")) for t in tiers]
    rate_rows = []
    for t in tiers:
        for key, label in (("write_bytes_per_s_mean", "mean"), ("write_bytes_per_s_peak", "peak")):
            if t.get(key) is not None:
                rate_rows.append({"tier": str(t.get("name")), "stat": label, "mbps": float(t[key]) / 1e6})
    rates = alt.Chart(alt.Data(values=rate_rows)).mark_bar().encode(
        x=alt.X("tier:N", sort=names, title="Tier", axis=alt.Axis(labelAngle=0)), xOffset=alt.XOffset("stat:N", sort=["mean", "peak"]),
        y=alt.Y("mbps:Q", title="Writes (MB/s)"),
        color=alt.Color("stat:N", title="Write rate", sort=["mean", "peak"],
                        scale=alt.Scale(range=[OKABE_ITO[0], OKABE_ITO[4]])),
        tooltip=["tier:N", "stat:N", alt.Tooltip("mbps:Q", format=",.1f", title="MB/s")]
    ).properties(width=WIDTH / 2 - 40, height=HEIGHT, title="Write rate")
    dwpd_rows = [{"tier": str(t.get("name")), "dwpd": float(t["dwpd_per_drive"]),
                  "rating": t.get("dwpd_rating")} for t in tiers if t.get("dwpd_per_drive") is not None]
    if not dwpd_rows:
        return ChartSpec("writes-dwpd", "Write rate per tier", "Bytes written into each tier per second.",
                         _spec(rates))
    dwpd_title = "Drive writes per day (DWPD)"
    dwpd_base = alt.Chart(alt.Data(values=dwpd_rows)).encode(
        x=alt.X("tier:N", sort=names, title="Tier", axis=alt.Axis(labelAngle=0)))
    bars = dwpd_base.mark_bar(color=OKABE_ITO[2], size=44).encode(
        y=alt.Y("dwpd:Q", title=dwpd_title),
        tooltip=["tier:N", alt.Tooltip("dwpd:Q", format=".2f", title="DWPD"),
                 alt.Tooltip("rating:Q", title="Drive rating")])
    rated = dwpd_base.transform_filter("datum.rating != null")
    rating = rated.mark_tick(color="black", thickness=3, size=64).encode(y=alt.Y("rating:Q", title=dwpd_title))
    rating_text = rated.transform_calculate(label="'rating ' + format(datum.rating, '.2~f')").mark_text(
        dy=-8, baseline="bottom", fontSize=11).encode(y=alt.Y("rating:Q", title=dwpd_title), text="label:N")
    dwpd = alt.layer(bars, rating, rating_text).properties(width=alt.Step(90), height=HEIGHT,
                                                           title="DWPD per drive (black tick: rating)")
    return ChartSpec("writes-dwpd", "Writes and drive endurance",
                     "Left: bytes written into each tier per second (mean and peak). Right: drive writes "
                     "per day per drive, after RAID and write amplification, against the drive's rating.",
                     _spec(alt.hconcat(rates, dwpd).resolve_scale(color="independent")))


def spend_by_ttl(d: dict) -> ChartSpec | None:
    """API spend of the window's requests under a 5 min and a 1 h cache TTL (and as observed)."""
    import altair as alt

    spend = d.get("spend") or {}
    rows = [{"scenario": f"{_ttl_label(t.get('ttl_s'))} TTL", "kind": "what-if", "usd": float(t["spend_usd"])}
            for t in spend.get("ttl") or [] if t.get("spend_usd") is not None]
    if not rows:
        return None
    if (spend.get("observed") or {}).get("spend_usd") is not None:
        rows.append({"scenario": "as observed", "kind": "observed", "usd": float(spend["observed"]["spend_usd"])})
    order = [r["scenario"] for r in rows]
    base = alt.Chart(alt.Data(values=rows)).encode(
        y=alt.Y("scenario:N", title="Cache TTL", sort=order),
        x=alt.X("usd:Q", title="Spend (USD)", axis=alt.Axis(format="$,.2~f")))
    bars = base.mark_bar(size=26).encode(
        color=alt.Color("kind:N", title=None, sort=["what-if", "observed"],
                        scale=alt.Scale(domain=["what-if", "observed"], range=[OKABE_ITO[0], "#999"])),
        tooltip=["scenario:N", alt.Tooltip("usd:Q", format="$,.2f", title="Spend")])
    text = base.mark_text(align="left", dx=4, fontSize=12).encode(text=alt.Text("usd:Q", format="$,.2f"))
    chart = alt.layer(bars, text).properties(width=WIDTH, height=44 * len(rows))
    return ChartSpec("spend", "API spend by cache TTL",
                     "What the window's requests cost with hosted prompt caching at each TTL (cache "
                     "writes ×1.25 of the base input price for 5 min, ×2 for 1 h; reads ×0.1), against "
                     "the spend the telemetry reported.", _spec(chart))


BUILDERS = (token_mix_over_time, reuse_time_cdf, miss_ratio_curves, working_set_over_time,
            ttft_distributions, writes_and_dwpd, spend_by_ttl)


def build_charts(d: dict) -> list[ChartSpec]:
    """Every chart the report's data supports, in reading order."""
    return [c for c in (b(d) for b in BUILDERS) if c is not None]


@functools.cache
def vl_version() -> str | None:
    """The Vega-Lite version Altair writes, as vl-convert names it (``6.4``), if vl-convert has it."""
    import altair as alt
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None
