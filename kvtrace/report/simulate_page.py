"""The HTML page of a ``kvtrace simulate`` result: its charts and tables, one self-contained file.

It formats the ``kvtrace.simulate/1`` dict (docs/simulate.md) and never recomputes it. The page
template, the inlined Vega bundle and the chart style are the report's.
"""

from __future__ import annotations

from kvtrace.report.charts import BYTES_LABEL, HEIGHT, TOKENS_LABEL, WIDTH, ChartSpec, _spec
from kvtrace.report.html import _e, _figure, _lib_versions, _template, js_bundle
from kvtrace.simulate.render import causes_text
from kvtrace.units import fmt_bytes

COHORTS = (("new", "New session"), ("continuing", "Continuing"), ("resumed", "Resumed after idle"))


def throughput_chart(res: dict) -> ChartSpec:
    """Processed tokens/s per minute, one line per configuration."""
    import altair as alt

    rows = [{"min": s["t_s"] / 60, "tok": s["processed_tokens_per_s"], "config": c["name"]}
            for c in res["configs"] for s in c["series"]]
    chart = alt.Chart(alt.Data(values=rows)).mark_line(strokeWidth=2).encode(
        x=alt.X("min:Q", title="Time (minutes)"),
        y=alt.Y("tok:Q", title="Processed tokens/s (prompt incl. cached + output)", axis=alt.Axis(labelExpr=TOKENS_LABEL)),
        color=alt.Color("config:N", title="Configuration", sort=[c["name"] for c in res["configs"]]),
        tooltip=["config:N", alt.Tooltip("min:Q", title="minute"), alt.Tooltip("tok:Q", format=",.0f")],
    ).properties(width=WIDTH, height=HEIGHT)
    return ChartSpec("sim-throughput", "Throughput over time",
                     "One-minute means of processed tokens/s (every prompt token, cached included, plus output).",
                     _spec(chart))


def occupancy_chart(res: dict) -> ChartSpec | None:
    """Bytes held by each offload tier over time, against its capacity."""
    import altair as alt

    rows, caps = [], []
    for c in res["configs"]:
        for t in c["tiers"][1:]:
            label = f"{c['name']}: {t['name']}"
            caps.append({"series": label, "bytes": t["capacity_bytes"]})
            rows += [{"min": s["t_s"] / 60, "bytes": s["occupancy_bytes"][t["name"]], "series": label}
                     for s in c["series"]]
    if not rows:
        return None
    lines = alt.Chart(alt.Data(values=rows)).mark_line(strokeWidth=2, interpolate="step-after").encode(
        x=alt.X("min:Q", title="Time (minutes)"), y=alt.Y("bytes:Q", title="KV held", axis=alt.Axis(labelExpr=BYTES_LABEL)),
        color=alt.Color("series:N", title="Configuration: tier"),
        tooltip=["series:N", alt.Tooltip("min:Q", title="minute"), alt.Tooltip("bytes:Q", format=",.3s")])
    peak = max(r["bytes"] for r in rows) or 1.0
    shown = [c for c in caps if c["bytes"] <= 3 * peak]     # far-off capacities would flatten the lines
    hidden = [c for c in caps if c["bytes"] > 3 * peak]
    layers = [lines]
    if shown:
        layers.append(alt.Chart(alt.Data(values=shown)).mark_rule(strokeDash=[2, 3], color="#555").encode(
            y="bytes:Q", tooltip=["series:N", alt.Tooltip("bytes:Q", format=",.3s", title="capacity")]))
    caption = ("KV held by each offload tier at the start of each minute; dotted: capacities. "
               "A tier is full at its first eviction (first_full_s).")
    if hidden:
        caption += " Far above: " + ", ".join(f"{c['series']} holds {fmt_bytes(c['bytes'])}" for c in hidden) + "."
    return ChartSpec("sim-occupancy", "Offload tier occupancy", caption,
                     _spec(alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)))


def ttft_chart(res: dict) -> ChartSpec:
    """TTFT p50 / p90 / max per cohort and configuration."""
    import altair as alt

    rows = []
    for c in res["configs"]:
        for key, label in COHORTS:
            v = c["ttft"][key]
            for q in ("p50_s", "p90_s", "max_s"):
                if v[q] is not None:
                    rows.append({"config": c["name"], "cohort": label, "q": q[:-2], "s": v[q]})
    chart = alt.Chart(alt.Data(values=rows)).mark_point(filled=True, size=90).encode(
        x=alt.X("config:N", title=None, sort=[c["name"] for c in res["configs"]]),
        xOffset=alt.XOffset("q:N", sort=["p50", "p90", "max"]),
        y=alt.Y("s:Q", title="TTFT (seconds, log)", scale=alt.Scale(type="log")),
        color=alt.Color("q:N", title="Statistic", sort=["p50", "p90", "max"]),
        column=alt.Column("cohort:N", title=None, sort=[label for _, label in COHORTS]),
        tooltip=["config:N", "cohort:N", "q:N", alt.Tooltip("s:Q", format=",.2f")],
    ).properties(width=WIDTH // 3 - 20, height=HEIGHT)
    return ChartSpec("sim-ttft", "Time to first token by cohort",
                     "Queueing, offload loads and prefill together; the JSON splits them.", _spec(chart))


def _row(cells) -> str:
    return "<tr>" + "".join(f"<td>{_e(x)}</td>" for x in cells) + "</tr>"


def _tables(res: dict) -> str:
    def s(v):
        return "-" if v is None else f"{v:.2f}"

    out = ["<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in (
        "Configuration", "Nodes", "Peak tok/s", "Steady tok/s", "Peak ratio", "Steady ratio", "GPU busy",
        "$ / M processed tokens")) + "</tr></thead><tbody>"]
    for c in res["configs"]:
        usd = c["cost"]["usd_per_million_processed_tokens"]
        out.append(_row((c["name"], c.get("nodes", 1), f"{c['peak_tokens_per_s']:,.0f}",
                         f"{c['steady_tokens_per_s']:,.0f}", f"{c['ratio_peak']:.2f}x", f"{c['ratio_steady']:.2f}x",
                         f"{c['gpu_busy']:.0%}", "-" if usd is None else f"{usd:.3f}")))
    out.append("</tbody></table><table><thead><tr>" + "".join(f"<th>{h}</th>" for h in (
        "Configuration", "Tier", "Capacity", "First full", "Hit ratio", "Reads/s", "Writes/s", "Writes by cause",
        "DWPD")) +
        "</tr></thead><tbody>")
    for c in res["configs"]:
        for t in c["tiers"]:
            ff = t["first_full_s"]
            dw = t.get("dwpd_per_drive")
            out.append(_row((c["name"], t["name"], fmt_bytes(t["capacity_bytes"]),
                             "never" if ff is None else f"{ff / 60:.1f} min", f"{t['hit_ratio']:.1%}",
                             fmt_bytes(t["read_bytes_per_s"]) + "/s", fmt_bytes(t["write_bytes_per_s"]) + "/s",
                             causes_text(t), "-" if dw is None else f"{dw:.2f}")))
    out.append("</tbody></table><table><thead><tr>" + "".join(f"<th>{h}</th>" for h in (
        "Configuration", "Cohort", "Requests", "p50 s", "p90 s", "p99 s", "max s", "queue p50", "load p50",
        "prefill p50")) + "</tr></thead><tbody>")
    for c in res["configs"]:
        for key, label in COHORTS:
            v = c["ttft"][key]
            out.append(_row((c["name"], label, v["count"], s(v["p50_s"]), s(v["p90_s"]), s(v["p99_s"]),
                             s(v["max_s"]), s(v["queue_p50_s"]), s(v["load_p50_s"]), s(v["prefill_p50_s"]))))
    out.append("</tbody></table>")
    return "".join(out)


def render_simulate_html(res: dict) -> str:
    """The page for one ``simulate()`` result."""
    charts = [c for c in (throughput_chart(res), occupancy_chart(res), ttft_chart(res)) if c is not None]
    node = res["node"]
    line = (f"{res['duration_s'] / 3600:.3g} h of {res['sessions']} sessions on {node['gpus']} x {node['gpu']}, "
            f"{node['model']} ({node['kv_dtype']} KV); efficiencies prefill {node['prefill_efficiency']:g}, "
            f"decode {node['decode_efficiency']:g}")
    body = "\n".join(["<h2>Serving model</h2>", _figure(charts[0]), _tables(res), *(_figure(c) for c in charts[1:])])
    footer = f"kvtrace simulate · schema {res['schema']} · charts drawn in this page by {_lib_versions()}, inlined"
    return _template().substitute(title=_e(f"kvtrace simulate: {res['scenario']}"), generator="kvtrace",
                                  window_line=_e(line), bundle=js_bundle(), body=body, footer=_e(footer),
                                  n_charts=len(charts))
