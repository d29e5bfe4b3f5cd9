"""Chart specs (Vega-Lite, built with Altair) from the report dict: reshaping only, no analysis.

Each builder reads one part of ``Report.data`` (keys in ``docs/report-schema.md``) and returns a
:class:`ChartSpec`, or ``None`` when the report lacks that data, so a chart appears exactly when
its data exists. The HTML page embeds the specs; :mod:`kvtrace.report.html` also renders PNG and
SVG copies through vl-convert. Colours are the Okabe–Ito palette (safe for the common kinds of
colour blindness) and every axis title carries its unit.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from kvtrace.units import fmt_age, fmt_bytes, fmt_tokens, fmt_ttl
from kvtrace.report.tables import CLASS_LABELS, SIM_COHORTS

# Okabe & Ito, "Color Universal Design" (2008): distinguishable with protanopia, deuteranopia, tritanopia.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
CLASS_COLORS = {
    "cache_read": "#0072B2",
    "cache_write_5m": "#E69F00",
    "cache_write_1h": "#D55E00",
    "cache_write_unknown": "#CC79A7",
    "output": "#009E73",
    "input_uncached": "#56B4E9",
}
WIDTH, HEIGHT = 640, 260
FONT = "Liberation Sans, DejaVu Sans, Helvetica, Arial, sans-serif"
MARKS = ((300.0, "5 min"), (3600.0, "1 h"))  # TTLs marked on reuse-time charts


@dataclass
class ChartSpec:
    """One chart: a stable id (file names, DOM ids), a title, a caption and the Vega-Lite spec."""

    id: str
    title: str
    caption: str
    spec: dict
    section: str = ""  # the report section it belongs to (set by kvtrace.report.registry)


def _config(chart):
    # Large type and a white background: the charts are read printed and pasted into chat as PNG.
    return (
        chart.configure(font=FONT, background="white", padding=8)
        .configure_axis(labelFontSize=12, titleFontSize=13, gridColor="#e6e6e6")
        .configure_legend(labelFontSize=12, titleFontSize=12, orient="right")
        .configure_title(fontSize=15, anchor="start")
        .configure_range(category=OKABE_ITO)
        .configure_view(stroke=None)
    )


def _spec(chart) -> dict:
    return _config(chart).to_dict()


def _utc_iso(key: str) -> str:
    """A day (``2026-11-02``) or hour (``2026-11-02T08:00``) key as an explicit UTC instant,
    so browsers in any time zone place it the same way."""
    return (key + "T00:00:00Z") if len(key) == 10 else (key + ":00Z" if len(key) == 16 else key)


def _on_a_time_axis(key) -> bool:
    """A key a time axis can place: a stored time past year 9999 (accepted by DuckDB, not by
    Python or a browser) is left out of the chart; the tables still list it."""
    try:
        datetime.fromisoformat(_utc_iso(str(key)).replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def _ttl_label(ttl_s) -> str:
    return "no TTL" if ttl_s is None else fmt_ttl(float(ttl_s))


# Axis labels with units (Vega expressions): decimal bytes as in the tables, durations in µs/ms/s.
# Vega's "~s" format would print 0.1 ms as "100m" and 20 GB as "20G".
BYTES_LABEL = (
    "datum.value >= 1e15 ? format(datum.value / 1e15, '~g') + ' PB' : "
    "datum.value >= 1e12 ? format(datum.value / 1e12, '~g') + ' TB' : "
    "datum.value >= 1e9 ? format(datum.value / 1e9, '~g') + ' GB' : "
    "datum.value >= 1e6 ? format(datum.value / 1e6, '~g') + ' MB' : "
    "datum.value >= 1e3 ? format(datum.value / 1e3, '~g') + ' KB' : format(datum.value, '~g') + ' B'"
)
TOKENS_LABEL = (
    "datum.value >= 1e9 ? format(datum.value / 1e9, '~g') + ' G' : "
    "datum.value >= 1e6 ? format(datum.value / 1e6, '~g') + ' M' : "
    "datum.value >= 1e3 ? format(datum.value / 1e3, '~g') + ' K' : format(datum.value, '~g')"
)
SECONDS_LABEL = (
    "datum.value >= 86400 ? format(datum.value / 86400, '~g') + ' d' : "
    "datum.value >= 3600 ? format(datum.value / 3600, '~g') + ' h' : "
    "datum.value >= 60 ? format(datum.value / 60, '~g') + ' min' : format(datum.value, '~g') + ' s'"
)
MS_LABEL = (
    "datum.value < 1 ? format(datum.value * 1000, '~g') + ' µs' : "
    "datum.value < 1000 ? format(datum.value, '~g') + ' ms' : format(datum.value / 1000, '~g') + ' s'"
)
# One date-time format on every time axis: the ISO date over the UTC time of day.
DATETIME_LABEL = "[utcFormat(datum.value, '%Y-%m-%d'), utcFormat(datum.value, '%H:%M')]"
DATE_FORMAT = "%Y-%m-%d"
# Two series closer than this (a share, i.e. 0.5 percentage points) are drawn on top of each other.
COINCIDE = 0.005
# Token mix buckets: bars up to this many (each bar is one bucket's sum), areas beyond.
AREA_MIN_POINTS = 24


def _decades(lo: float, hi: float) -> list[float]:
    """Powers of ten covering ``[lo, hi]``: the tick values of a log axis."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0**k for k in range(a, b + 1)]


def _time_ticks(t0: datetime, t1: datetime) -> list[float]:
    """About six to ten tick instants (epoch ms) over ``[t0, t1]`` at a round UTC step."""
    span = max((t1 - t0).total_seconds(), 1.0)
    step = next(
        (s for s in (300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800) if span / s <= 10),
        604800 * math.ceil(span / 604800 / 10),
    )
    first = math.ceil(t0.timestamp() / step) * step
    ticks = [float(t * 1000) for t in range(int(first), int(t1.timestamp()) + 1, step)]
    return ticks or [t0.timestamp() * 1000]


def _time_axis(t0: datetime, t1: datetime):
    import altair as alt

    return alt.Axis(values=_time_ticks(t0, t1), labelExpr=DATETIME_LABEL, labelAngle=0, labelOverlap=True)


def bytes_per_token(d: dict) -> float | None:
    """KV bytes per token of the report's ``--model`` (None without one): from the tier replay's
    model, else from the TTL section's peak bytes."""
    m = (d.get("tiers") or {}).get("model") or {}
    if m.get("bytes_per_token"):
        return float(m["bytes_per_token"])
    for e in d.get("ttl") or []:
        ws = e.get("working_set") or {}
        if ws.get("peak_bytes") and ws.get("peak_tokens"):
            return float(ws["peak_bytes"]) / float(ws["peak_tokens"])
    return None


def _kv_bytes_title(d: dict, bpt: float) -> str:
    m = (d.get("tiers") or {}).get("model") or {}
    name = f"{m['name']} {m.get('kv_dtype') or ''}".strip() if m.get("name") else None
    return f"KV cache of {name}, {bpt:,.0f} B/token" if name else f"KV cache at {bpt:,.0f} B/token"


def _coincide_note(order: list[str], curves: dict[str, dict], unit) -> list[str]:
    """Sentences naming the pairs of neighbouring series that lie within ``COINCIDE`` of each other
    (and so are drawn over one another) and where: everywhere, or up to / from some x."""
    notes = []
    for a, b in zip(order, order[1:]):
        xs = sorted(set(curves[a]) & set(curves[b]))
        close = [x for x in xs if abs(curves[a][x] - curves[b][x]) <= COINCIDE]
        if not close:
            continue
        where = (
            "everywhere"
            if len(close) == len(xs)
            else f"up to {unit(close[-1])}"
            if close == xs[: len(close)]
            else f"from {unit(close[0])}"
            if close == xs[-len(close) :]
            else f"at {len(close)} of {len(xs)} points"
        )
        notes.append(f"{a} and {b} coincide (within {COINCIDE * 100:g} percentage points) {where}.")
    return notes


def _series_layers(chart, field: str, title: str, series: list[str], widest: float = 4.5, **enc) -> list:
    """One layer per series of ``chart`` (a mark over all rows), so that series that run together
    stay visible: the last series is drawn first, widest and solid; each one above it is narrower
    and dashed, with its own colour. One legend shows colour and dash."""
    import altair as alt

    n = len(series)
    dashes = [[1, 0], [8, 4], [2, 3], [12, 3, 2, 3]]
    width = [widest if (i == n - 1 and n > 1) else 2.0 for i in range(n)]
    legend = alt.Legend(symbolType="stroke", labelLimit=300)
    style = dict(
        color=alt.Color(
            f"{field}:N", title=title, sort=series, legend=legend, scale=alt.Scale(domain=series, range=OKABE_ITO[:n])
        ),
        strokeDash=alt.StrokeDash(
            f"{field}:N",
            title=title,
            sort=series,
            legend=legend,
            scale=alt.Scale(domain=series, range=[dashes[(n - 1 - i) % 4] for i in range(n)]),
        ),
        strokeWidth=alt.StrokeWidth(
            f"{field}:N", title=title, sort=series, legend=legend, scale=alt.Scale(domain=series, range=width)
        ),
    )
    return [chart.transform_filter(alt.datum[field] == name).encode(**enc, **style) for name in reversed(series)]


def _bounds(entries: list[dict]) -> tuple[datetime, datetime]:
    keys = sorted(_utc_iso(str(e["key"])) for e in entries)
    return tuple(datetime.fromisoformat(k.replace("Z", "+00:00")) for k in (keys[0], keys[-1]))


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
    entries = [e for e in entries or [] if e.get("key") and _on_a_time_axis(e["key"])]
    if not entries:
        return None
    rows = [
        {"t": _utc_iso(str(e["key"])), "class": CLASS_LABELS[k], "order": i, "tokens": e["token_mix"][k]}
        for e in entries
        for i, k in enumerate(CLASS_LABELS)
        if e["token_mix"][k]
    ]
    unit = "utcyearmonthdatehours" if bucket == "hour" else "utcyearmonthdate"
    per = "hour" if bucket == "hour" else "day"
    labels = [CLASS_LABELS[k] for k in CLASS_LABELS]
    color = alt.Color(
        "class:N",
        title="Token class",
        sort=labels,
        scale=alt.Scale(domain=labels, range=[CLASS_COLORS[k] for k in CLASS_LABELS]),
    )
    # Few buckets are bars (each is one bucket's sum; an area would invent the values between them).
    few = len(entries) < AREA_MIN_POINTS
    if bucket == "hour":
        axis = _time_axis(*_bounds(entries))
    else:
        # Bars span their day: label each under its middle (noon UTC).
        t0, t1 = _bounds(entries)
        noons = [(t0.timestamp() + 43200 + 86400 * i) * 1000 for i in range((t1 - t0).days + 1)] if few else None
        axis = alt.Axis(
            format=DATE_FORMAT, labelAngle=0, labelOverlap=True, **({"values": noons, "ticks": False} if few else {})
        )
    base = alt.Chart(alt.Data(values=rows)).encode(
        x=alt.X("t:T", timeUnit=unit, title=f"Time (UTC, per {per})", axis=axis),
        color=color,
        order=alt.Order("order:Q"),
        tooltip=[
            alt.Tooltip(
                "t:T", timeUnit=unit, title="Time (UTC)", format="%Y-%m-%d %H:%M" if bucket == "hour" else DATE_FORMAT
            ),
            "class:N",
            alt.Tooltip("tokens:Q", format=","),
        ],
    )
    mark = base.mark_bar() if few else base.mark_area(opacity=0.9)
    top = mark.encode(
        y=alt.Y("sum(tokens):Q", stack="zero", title=f"Tokens per {per}", axis=alt.Axis(labelExpr=TOKENS_LABEL))
    ).properties(width=WIDTH, height=HEIGHT, title="All token classes")
    rest = (
        mark.transform_filter(alt.datum["class"] != CLASS_LABELS["cache_read"])
        .encode(
            y=alt.Y("sum(tokens):Q", stack="zero", title=f"Tokens per {per}", axis=alt.Axis(labelExpr=TOKENS_LABEL))
        )
        .properties(width=WIDTH, height=HEIGHT * 0.7, title="Without cache reads")
    )
    return ChartSpec(
        "token-mix-over-time",
        f"Token mix per {per}",
        "Tokens of each class per UTC " + per + "; the lower panel leaves out cache reads.",
        _spec(alt.vconcat(top, rest).resolve_scale(y="independent")),
    )


REUSE_KINDS = (("reuse_time", "Block age (since last use)"), ("effective_reuse_time", "Effective (prefix) reuse time"))


def reuse_time_cdf(d: dict) -> ChartSpec | None:
    """Token-weighted CDFs of reuse time (``reuse.reuse_time.cdf`` and the effective one), with the
    5 min and 1 h TTLs marked. The axis ends at the trace's span (no reuse time can exceed it);
    when the two CDFs are identical one line is drawn and the caption says so."""
    import altair as alt

    reuse = d.get("reuse") or {}
    curves = {
        label: [
            (float(p["t_s"]), float(p["share_tokens"])) for p in (reuse.get(key) or {}).get("cdf") or [] if p.get("t_s")
        ]
        for key, label in REUSE_KINDS
    }
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return None
    identical = len(curves) == 2 and len(set(map(tuple, curves.values()))) == 1
    if identical:
        curves = {"Block age = effective (prefix) reuse time": next(iter(curves.values()))}
    span = float((reuse.get("trace") or {}).get("span_s") or 0)
    if span and span <= min(s for pts in curves.values() for s, _ in pts):
        span = 0.0  # a trace shorter than the first CDF point: nothing to clip to
    rows = []
    for label, pts in curves.items():
        kept = [(s, c) for s, c in pts if not span or s <= span]
        if span and len(kept) < len(pts) and (not kept or kept[-1][0] < span):
            kept.append((span, 1.0))  # every reuse time is at most the span: the CDF is 1 there
        rows += [{"s": s, "cdf": c, "kind": label} for s, c in kept]
    lo, hi = min(r["s"] for r in rows), max(r["s"] for r in rows)
    x_title = "Reuse time (log scale)"
    kinds = list(curves)
    x = dict(
        scale=alt.Scale(type="log", domain=[lo, hi], nice=False),
        title=x_title,
        axis=alt.Axis(values=[v for v in _reuse_ticks() if lo <= v <= hi], labelExpr=SECONDS_LABEL),
    )
    legend = alt.Legend(orient="bottom", direction="vertical", labelLimit=400, symbolType="stroke")
    line = (
        alt.Chart(alt.Data(values=rows))
        .mark_line(point=True, strokeWidth=2.5)
        .encode(
            x=alt.X("s:Q", **x),
            y=alt.Y(
                "cdf:Q",
                scale=alt.Scale(domain=[0, 1]),
                title="Share of reused tokens (cumulative)",
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color(
                "kind:N",
                title="Reuse time",
                sort=kinds,
                legend=legend,
                scale=alt.Scale(domain=kinds, range=[OKABE_ITO[0], OKABE_ITO[1]][: len(kinds)]),
            ),
            strokeDash=alt.StrokeDash(
                "kind:N",
                title="Reuse time",
                sort=kinds,
                legend=legend,
                scale=alt.Scale(domain=kinds, range=[[1, 0], [8, 4]][: len(kinds)]),
            ),
            tooltip=[
                "kind:N",
                alt.Tooltip("s:Q", title="Reuse time (s)", format=",.0f"),
                alt.Tooltip("cdf:Q", title="Cumulative share", format=".2%"),
            ],
        )
    )
    marks = [{"s": s, "label": label} for s, label in MARKS if lo <= s <= hi]
    layers = [line]
    if marks:
        layers.append(
            alt.Chart(alt.Data(values=marks))
            .mark_rule(color=OKABE_ITO[5], strokeDash=[6, 4])
            .encode(x=alt.X("s:Q", **x))
        )
        # Labels sit above the plot area, where no data can hide them.
        layers.append(
            alt.Chart(alt.Data(values=marks))
            .mark_text(align="center", dy=-4, color=OKABE_ITO[5], fontSize=12, baseline="bottom")
            .encode(x=alt.X("s:Q", **x), y=alt.value(0), text="label:N")
        )
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    caption = (
        "Share of reused prompt tokens whose reuse time is at most the given time; dashed "
        "lines: the 5 min and 1 h cache TTLs. Effective reuse time is the largest block age "
        "along the prefix up to the block, since a prefix cache serves a block only if it "
        "serves every block before it."
    )
    if identical:
        caption += (
            " In this trace block age and effective reuse time are identical at every point, so one line is drawn."
        )
    if span:
        caption += f" The axis ends at the trace's span ({fmt_age(span)}), the longest possible reuse time."
    return ChartSpec("reuse-time-cdf", "Reuse time", caption, _spec(chart))


def _reuse_ticks() -> list[float]:
    return [1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400]


def miss_ratio_curves(d: dict) -> ChartSpec | None:
    """Hit ratio (tokens) against cache capacity for each TTL, tier boundaries marked. Capacity is
    in bytes of KV when the report has a model, else in tokens. Each TTL has its own dash and
    width, the longest drawn first (at the bottom, widest) so a line on top never hides it;
    identical TTL curves become one line and near ones are named in the caption."""
    import altair as alt

    tiers = d.get("tiers") or {}
    grid = [g for g in tiers.get("grid") or [] if g.get("capacity_tokens")]
    if not grid:
        return None
    bpt = bytes_per_token(d)
    use_bytes = bpt is not None and all(g.get("capacity_bytes") for g in grid)
    ttl_of = {_ttl_label(g.get("ttl_s")): (g.get("ttl_s") is None, g.get("ttl_s") or 0) for g in grid}
    order = sorted(ttl_of, key=ttl_of.get)
    curves = {lbl: {} for lbl in order}
    for g in grid:
        curves[_ttl_label(g.get("ttl_s"))][float(g["capacity_tokens"])] = float(g["hit_ratio_tokens"])
    # TTLs whose curves are the same at every capacity are one line, named for all of them.
    groups: list[list[str]] = []
    for lbl in order:
        same = next((grp for grp in groups if curves[grp[0]] == curves[lbl]), None)
        (same.append(lbl) if same else groups.append([lbl]))
    names = {" = ".join(grp): grp[0] for grp in groups}
    series = list(names)
    cap_bytes = {float(g["capacity_tokens"]): float(g["capacity_bytes"]) for g in grid} if use_bytes else {}
    rows = [
        {"cap": cap_bytes.get(c, c), "tokens": c, "hit": h, "ttl": name}
        for name, first in names.items()
        for c, h in curves[first].items()
    ]
    unit = (
        (lambda c: f"{fmt_tokens(c)} tokens ({fmt_bytes(cap_bytes[c])})")
        if use_bytes
        else (lambda c: f"{fmt_tokens(c)} tokens")
    )
    notes = _coincide_note(series, {n: curves[f] for n, f in names.items()}, unit)
    if use_bytes:
        x_title = f"Cache capacity (bytes, log scale; {_kv_bytes_title(d, bpt)})"
        label = BYTES_LABEL
    else:
        x_title = "Cache capacity (tokens, log scale)"
        label = TOKENS_LABEL
    lo, hi = min(r["cap"] for r in rows), max(r["cap"] for r in rows)
    depths = _tier_depths(tiers.get("tiers") or [])
    for t in depths:
        t["x"] = t["depth_tokens"] * bpt if use_bytes else t["depth_tokens"]
        lo, hi = min(lo, t["x"]), max(hi, t["x"])
    x_enc = dict(scale=alt.Scale(type="log"), title=x_title, axis=alt.Axis(values=_decades(lo, hi), labelExpr=label))
    tooltip = [
        "ttl:N",
        alt.Tooltip("tokens:Q", title="Capacity (tokens)", format=",.0f"),
        *([alt.Tooltip("cap:Q", title="Capacity (bytes)", format=",.0f")] if use_bytes else []),
        alt.Tooltip("hit:Q", title="Hit ratio", format=".2%"),
    ]
    y = alt.Y(
        "hit:Q", scale=alt.Scale(domain=[0, 1]), title="Hit ratio (share of prompt tokens)", axis=alt.Axis(format="%")
    )
    layers = _series_layers(
        alt.Chart(alt.Data(values=rows)).mark_line(),
        "ttl",
        "Idle TTL",
        series,
        x=alt.X("cap:Q", **x_enc),
        y=y,
        tooltip=tooltip,
    )
    if depths:
        layers.append(
            alt.Chart(alt.Data(values=depths))
            .mark_rule(color="#555", strokeDash=[2, 3])
            .encode(
                x=alt.X("x:Q", **x_enc),
                tooltip=["tier:N", alt.Tooltip("depth_tokens:Q", format=",.0f", title="Tier ends at (tokens)")],
            )
        )
        # Tier names read upwards from the foot of the plot, below the flat tops of the curves.
        layers.append(
            alt.Chart(alt.Data(values=depths))
            .mark_text(angle=270, align="left", dx=4, dy=-5, fontSize=11, color="#333")
            .encode(x=alt.X("x:Q", **x_enc), y=alt.value(HEIGHT), text="tier:N")
        )
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    caption = (
        "LRU hit ratio (token-weighted) at each cache capacity, one line per idle TTL (the longest "
        "TTL widest, underneath); dotted lines: where each tier ends in the LRU stack."
    )
    if use_bytes:
        caption += f" Capacity in bytes: {_kv_bytes_title(d, bpt)}."
    if any(len(g) > 1 for g in groups):
        caption += " " + " ".join(
            f"The {' and '.join(g)} curves are identical: one line is drawn." for g in groups if len(g) > 1
        )
    if notes:
        caption += " " + " ".join(notes)
    return ChartSpec("miss-ratio-curves", "Hit ratio against capacity", caption, _spec(chart))


def working_set_over_time(d: dict) -> ChartSpec | None:
    """Working set (tokens held under each TTL; bytes with a model) over time, against the tier
    boundaries. The caption quotes tier capacities exactly as the Tiers table does."""
    import altair as alt

    bpt = bytes_per_token(d)
    scale = bpt or 1.0
    rows = []
    peak = 0.0
    t_first = t_last = None
    for e in d.get("ttl") or []:
        series = (e.get("working_set") or {}).get("series") or {}
        if not series.get("max_tokens"):
            continue
        # The series is compact (start, step, values); each value is its bucket's maximum.
        t0 = datetime.fromisoformat(series["t0"].replace("Z", "+00:00"))
        for i, v in enumerate(series["max_tokens"]):
            t = t0 + timedelta(seconds=i * float(series["step_s"]))
            t_first, t_last = min(t_first or t, t), max(t_last or t, t)
            rows.append(
                {
                    "t": t.isoformat().replace("+00:00", "Z"),
                    "tokens": float(v),
                    "v": float(v) * scale,
                    "ttl": _ttl_label(e.get("ttl_s")),
                }
            )
            peak = max(peak, float(v))
    if not rows:
        return None
    order = [_ttl_label(e.get("ttl_s")) for e in d.get("ttl") or []]
    tiers = [t for t in (d.get("tiers") or {}).get("tiers") or [] if t.get("capacity_tokens") is not None]
    depths = _tier_depths(tiers)
    # Boundaries far above the peak would flatten the lines: name them in the caption instead.
    shown = [dict(t, v=t["depth_tokens"] * scale) for t in depths if t["depth_tokens"] <= 3 * peak]
    hidden = {t["tier"] for t in depths if t["depth_tokens"] > 3 * peak}
    top = max([peak] + [t["depth_tokens"] for t in shown]) * 1.08 * scale or 1.0
    y_title = "Working set (bytes of KV cache)" if bpt else "Working set (tokens)"
    y_axis = alt.Axis(labelExpr=BYTES_LABEL if bpt else TOKENS_LABEL)
    layers = _series_layers(
        alt.Chart(alt.Data(values=rows)).mark_line(interpolate="step-after"),
        "ttl",
        "Idle TTL",
        order,
        widest=3.5,
        x=alt.X("t:T", scale=alt.Scale(type="utc"), title="Time (UTC)", axis=_time_axis(t_first, t_last)),
        y=alt.Y("v:Q", scale=alt.Scale(domain=[0, top]), title=y_title, axis=y_axis),
        tooltip=[
            alt.Tooltip("t:T", title="Time (UTC)", timeUnit="utcyearmonthdatehoursminutes", format="%Y-%m-%d %H:%M"),
            "ttl:N",
            alt.Tooltip("tokens:Q", format=",.0f"),
            *([alt.Tooltip("v:Q", format=",.0f", title="bytes")] if bpt else []),
        ],
    )
    if shown:
        layers.append(
            alt.Chart(alt.Data(values=shown))
            .mark_rule(color="#555", strokeDash=[2, 3])
            .encode(
                y=alt.Y("v:Q", title=y_title, axis=y_axis),
                tooltip=["tier:N", alt.Tooltip("depth_tokens:Q", format=",.0f", title="Tier ends at (tokens)")],
            )
        )
        layers.append(
            alt.Chart(alt.Data(values=shown))
            .mark_text(align="left", dx=4, dy=-7, fontSize=11, color="#333")
            .encode(y=alt.Y("v:Q", title=y_title, axis=y_axis), x=alt.value(0), text="tier:N")
        )
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    caption = (
        "Tokens that an idle TTL keeps cached (the maximum of each time bucket), with unlimited "
        "capacity; dotted lines: tier boundaries (a tier fills when a line crosses its boundary)."
    )
    if bpt:
        caption += f" Bytes: {_kv_bytes_title(d, bpt)}."
    if hidden:
        # The same figures as the Tiers table (each tier's own capacity), not depths in the stack.
        caption += (
            f" The peak ({fmt_tokens(peak)} tokens) stays far below these tiers, so their "
            "boundaries are not drawn: "
            + ", ".join(
                f"{t['name']} holds {fmt_tokens(t['capacity_tokens'])} tokens"
                + (f" ({fmt_bytes(t['capacity_bytes'])})" if t.get("capacity_bytes") else "")
                for t in tiers
                if str(t.get("name", "tier")) in hidden
            )
            + "."
        )
    return ChartSpec("working-set", "Working set over time", caption, _spec(chart))


TTFT_QUANTILES = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("max_ms", "max"))
TTFT_COHORTS = (("continuing", "Continuing"), ("resumed", "Resumed after idle"), ("new", "New session"))


def ttft_distributions(d: dict) -> ChartSpec | None:
    """Modelled time to first token per session cohort: CDFs when the replay gives them
    (``cdf_ms`` at ``cdf_quantiles``), else the p50/p90/p99/max quantiles."""
    import altair as alt

    ttft = (d.get("tiers") or {}).get("ttft") or {}
    x_title = "Time to first token (log scale)"
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

    def x_axis():  # ticks at powers of ten over the data, labelled with their unit (µs, ms, s)
        ms = [r["ms"] for r in rows]
        return alt.Axis(values=_decades(min(ms), max(ms)), labelExpr=MS_LABEL, labelOverlap="greedy")

    caption = (
        "Modelled TTFT: reload of cached KV from each tier at its bandwidth plus re-prefill of "
        "missed tokens. Resumed sessions come back after an idle gap."
    )
    if rows:
        chart = (
            alt.Chart(alt.Data(values=rows))
            .mark_line(strokeWidth=2.5, interpolate="monotone")
            .encode(
                x=alt.X("ms:Q", scale=alt.Scale(type="log"), title=x_title, axis=x_axis()),
                y=alt.Y(
                    "share:Q",
                    scale=alt.Scale(domain=[0, 1]),
                    title="Share of requests (cumulative)",
                    axis=alt.Axis(format="%"),
                ),
                color=alt.Color("cohort:N", title="Session", sort=order),
                strokeDash=alt.StrokeDash("cohort:N", sort=order, legend=None),
                tooltip=[
                    "cohort:N",
                    alt.Tooltip("ms:Q", format=",.1f", title="TTFT (ms)"),
                    alt.Tooltip("share:Q", format=".1%", title="Share at or below"),
                ],
            )
            .properties(width=WIDTH, height=HEIGHT)
        )
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
        x=alt.X("ms:Q", scale=alt.Scale(type="log"), title=x_title, axis=x_axis()),
        y=alt.Y("cohort:N", title="Session", sort=order),
    )
    rule = base.mark_rule(color="#999", strokeWidth=2).encode(x=alt.X("min(ms):Q", title=x_title), x2="max(ms):Q")
    dots = base.mark_point(size=120, filled=True).encode(
        color=alt.Color("q:N", title="Quantile", sort=qs),
        shape=alt.Shape("q:N", title="Quantile", sort=qs),
        tooltip=["cohort:N", "q:N", alt.Tooltip("ms:Q", format=",.1f", title="TTFT (ms)")],
    )
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
    rates = (
        alt.Chart(alt.Data(values=rate_rows))
        .mark_bar()
        .encode(
            x=alt.X("tier:N", sort=names, title="Tier", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("stat:N", sort=["mean", "peak"]),
            y=alt.Y("mbps:Q", title="Writes (MB/s)"),
            color=alt.Color(
                "stat:N", title="Write rate", sort=["mean", "peak"], scale=alt.Scale(range=[OKABE_ITO[0], OKABE_ITO[4]])
            ),
            tooltip=["tier:N", "stat:N", alt.Tooltip("mbps:Q", format=",.1f", title="MB/s")],
        )
        .properties(width=WIDTH / 2 - 40, height=HEIGHT, title="Write rate")
    )
    unwritten = [
        {"tier": str(t.get("name")), "label": "no writes"}
        for t in tiers
        if not t.get("write_bytes_per_s_peak") and not t.get("write_bytes_per_s_mean")
    ]
    if unwritten:  # an empty slot would read as missing data
        rates = alt.layer(
            rates,
            alt.Chart(alt.Data(values=unwritten))
            .mark_text(baseline="bottom", dy=-4, fontSize=12, color="#555")
            .encode(x=alt.X("tier:N", sort=names, title="Tier"), y=alt.value(HEIGHT), text="label:N"),
        )
    dwpd_rows = [
        {"tier": str(t.get("name")), "dwpd": float(t["dwpd_per_drive"]), "rating": t.get("dwpd_rating")}
        for t in tiers
        if t.get("dwpd_per_drive") is not None
    ]
    if not dwpd_rows:
        return ChartSpec("writes-dwpd", "Write rate per tier", "Bytes written into each tier per second.", _spec(rates))
    if not any(r["dwpd"] > 0 for r in dwpd_rows):
        # An endurance panel of zero-height bars looks broken: say what it would show instead.
        drives = ", ".join(
            f"{r['tier']}" + (f" (rated {r['rating']:g} DWPD)" if r["rating"] is not None else "") for r in dwpd_rows
        )
        return ChartSpec(
            "writes-dwpd",
            "Write rate per tier",
            "Bytes written into each tier per second (mean and peak). No drive tier was written "
            f"in this window, so drive endurance is not charted: {drives} received 0 bytes, "
            "0 drive writes per day.",
            _spec(rates),
        )
    dwpd_title = "Drive writes per day (DWPD)"
    dwpd_base = alt.Chart(alt.Data(values=dwpd_rows)).encode(
        x=alt.X("tier:N", sort=names, title="Tier", axis=alt.Axis(labelAngle=0))
    )
    bars = dwpd_base.mark_bar(color=OKABE_ITO[2], size=44).encode(
        y=alt.Y("dwpd:Q", title=dwpd_title),
        tooltip=[
            "tier:N",
            alt.Tooltip("dwpd:Q", format=".2f", title="DWPD"),
            alt.Tooltip("rating:Q", title="Drive rating"),
        ],
    )
    rated = dwpd_base.transform_filter("datum.rating != null")
    rating = rated.mark_tick(color="black", thickness=3, size=64).encode(y=alt.Y("rating:Q", title=dwpd_title))
    rating_text = (
        rated.transform_calculate(label="'rating ' + format(datum.rating, '.2~f')")
        .mark_text(dy=-8, baseline="bottom", fontSize=11)
        .encode(y=alt.Y("rating:Q", title=dwpd_title), text="label:N")
    )
    dwpd = alt.layer(bars, rating, rating_text).properties(
        width=alt.Step(90), height=HEIGHT, title="DWPD per drive (black tick: rating)"
    )
    return ChartSpec(
        "writes-dwpd",
        "Writes and drive endurance",
        "Left: bytes written into each tier per second (mean and peak). Right: drive writes "
        "per day per drive, after RAID and write amplification, against the drive's rating.",
        _spec(alt.hconcat(rates, dwpd).resolve_scale(color="independent")),
    )


def spend_by_ttl(d: dict) -> ChartSpec | None:
    """API spend of the window's requests under a 5 min and a 1 h cache TTL (and as observed)."""
    import altair as alt

    spend = d.get("spend") or {}
    rows = [
        {"scenario": f"{_ttl_label(t.get('ttl_s'))} TTL", "kind": "what-if", "usd": float(t["spend_usd"])}
        for t in spend.get("ttl") or []
        if t.get("spend_usd") is not None
    ]
    if not rows:
        return None
    if (spend.get("observed") or {}).get("spend_usd") is not None:
        rows.append({"scenario": "as observed", "kind": "observed", "usd": float(spend["observed"]["spend_usd"])})
    order = [r["scenario"] for r in rows]
    base = alt.Chart(alt.Data(values=rows)).encode(
        y=alt.Y("scenario:N", title="Cache TTL", sort=order),
        x=alt.X("usd:Q", title="Spend (USD)", axis=alt.Axis(format="$,.2~f")),
    )
    bars = base.mark_bar(size=26).encode(
        color=alt.Color(
            "kind:N",
            title=None,
            sort=["what-if", "observed"],
            scale=alt.Scale(domain=["what-if", "observed"], range=[OKABE_ITO[0], "#999"]),
        ),
        tooltip=["scenario:N", alt.Tooltip("usd:Q", format="$,.2f", title="Spend")],
    )
    text = base.mark_text(align="left", dx=4, fontSize=12).encode(text=alt.Text("usd:Q", format="$,.2f"))
    chart = alt.layer(bars, text).properties(width=WIDTH, height=44 * len(rows))
    return ChartSpec(
        "spend",
        "API spend by cache TTL",
        "What the window's requests cost with hosted prompt caching at each TTL (cache "
        "writes ×1.25 of the base input price for 5 min, ×2 for 1 h; reads ×0.1), against "
        "the spend the telemetry reported.",
        _spec(chart),
    )


# -- the serving model (a ``kvtrace.simulate/1`` dict: the report's ``simulate`` section, or the
# page of ``kvtrace simulate --format html``) -----------------------------------------------------


def _inline(spec: dict, rows: list[dict]) -> dict:
    """``spec`` with ``rows`` as the values of its one empty inline data (at the top, where Altair
    moves a lone layer's data, or in a layer). A run's series has a row per minute and configuration
    (10 K a week): Altair would validate and copy every row, seconds per chart, so the charts are
    built on no rows and given them after."""
    for at in (spec, *spec.get("layer", ())):
        if at.get("data") == {"values": []}:
            at["data"]["values"] = rows
            return spec
    raise ValueError("the chart has no empty inline data to fill")


def throughput_chart(res: dict) -> ChartSpec:
    """Processed tokens/s per minute, one line per configuration."""
    import altair as alt

    rows = [
        {"min": s["t_s"] / 60, "tok": s["processed_tokens_per_s"], "config": c["name"]}
        for c in res["configs"]
        for s in c["series"]
    ]
    chart = (
        alt.Chart(alt.Data(values=[]))
        .mark_line(strokeWidth=2)
        .encode(
            x=alt.X("min:Q", title="Time (minutes)"),
            y=alt.Y(
                "tok:Q",
                title="Processed tokens/s (prompt incl. cached + output)",
                axis=alt.Axis(labelExpr=TOKENS_LABEL),
            ),
            color=alt.Color("config:N", title="Configuration", sort=[c["name"] for c in res["configs"]]),
            tooltip=["config:N", alt.Tooltip("min:Q", title="minute"), alt.Tooltip("tok:Q", format=",.0f")],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )
    return ChartSpec(
        "sim-throughput",
        "Throughput over time",
        "One-minute means of processed tokens/s (every prompt token, cached included, plus output).",
        _inline(_spec(chart), rows),
    )


def occupancy_chart(res: dict) -> ChartSpec | None:
    """Bytes held by each offload tier over time, against its capacity."""
    import altair as alt

    rows, caps = [], []
    for c in res["configs"]:
        for t in c["tiers"][1:]:
            label = f"{c['name']}: {t['name']}"
            caps.append({"series": label, "bytes": t["capacity_bytes"]})
            rows += [
                {"min": s["t_s"] / 60, "bytes": s["occupancy_bytes"][t["name"]], "series": label} for s in c["series"]
            ]
    if not rows:
        return None
    lines = (
        alt.Chart(alt.Data(values=[]))
        .mark_line(strokeWidth=2, interpolate="step-after")
        .encode(
            x=alt.X("min:Q", title="Time (minutes)"),
            y=alt.Y("bytes:Q", title="KV held", axis=alt.Axis(labelExpr=BYTES_LABEL)),
            color=alt.Color("series:N", title="Configuration: tier"),
            tooltip=["series:N", alt.Tooltip("min:Q", title="minute"), alt.Tooltip("bytes:Q", format=",.3s")],
        )
    )
    peak = max(r["bytes"] for r in rows) or 1.0
    shown = [c for c in caps if c["bytes"] <= 3 * peak]  # far-off capacities would flatten the lines
    hidden = [c for c in caps if c["bytes"] > 3 * peak]
    layers = [lines]
    if shown:
        layers.append(
            alt.Chart(alt.Data(values=shown))
            .mark_rule(strokeDash=[2, 3], color="#555")
            .encode(y="bytes:Q", tooltip=["series:N", alt.Tooltip("bytes:Q", format=",.3s", title="capacity")])
        )
    caption = (
        "KV held by each offload tier at the start of each minute; dotted: capacities. "
        "A tier is full at its first eviction (first_full_s)."
    )
    if hidden:
        caption += " Far above: " + ", ".join(f"{c['series']} holds {fmt_bytes(c['bytes'])}" for c in hidden) + "."
    return ChartSpec(
        "sim-occupancy",
        "Offload tier occupancy",
        caption,
        _inline(_spec(alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)), rows),
    )


def ttft_chart(res: dict) -> ChartSpec:
    """TTFT p50 / p90 / max per cohort and configuration."""
    import altair as alt

    rows = []
    for c in res["configs"]:
        for key, label in SIM_COHORTS:
            v = c["ttft"][key]
            for q in ("p50_s", "p90_s", "max_s"):
                if v[q] is not None:
                    rows.append({"config": c["name"], "cohort": label, "q": q[:-2], "s": v[q]})
    chart = (
        alt.Chart(alt.Data(values=rows))
        .mark_point(filled=True, size=90)
        .encode(
            x=alt.X("config:N", title=None, sort=[c["name"] for c in res["configs"]]),
            xOffset=alt.XOffset("q:N", sort=["p50", "p90", "max"]),
            y=alt.Y("s:Q", title="TTFT (seconds, log)", scale=alt.Scale(type="log")),
            color=alt.Color("q:N", title="Statistic", sort=["p50", "p90", "max"]),
            column=alt.Column("cohort:N", title=None, sort=[label for _, label in SIM_COHORTS]),
            tooltip=["config:N", "cohort:N", "q:N", alt.Tooltip("s:Q", format=",.2f")],
        )
        .properties(width=WIDTH // 3 - 20, height=HEIGHT)
    )
    return ChartSpec(
        "sim-ttft",
        "Time to first token by cohort",
        "Queueing, offload loads and prefill together; the JSON splits them.",
        _spec(chart),
    )


# The report's ``simulate`` section draws the same three charts.


def simulate_throughput(d: dict) -> ChartSpec | None:
    return throughput_chart(d["simulate"]) if d.get("simulate") else None


def simulate_occupancy(d: dict) -> ChartSpec | None:
    return occupancy_chart(d["simulate"]) if d.get("simulate") else None


def simulate_ttft(d: dict) -> ChartSpec | None:
    return ttft_chart(d["simulate"]) if d.get("simulate") else None


@functools.cache
def vl_version() -> str | None:
    """The Vega-Lite version Altair writes, as vl-convert names it (``6.4``), if vl-convert has it."""
    import altair as alt
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None
