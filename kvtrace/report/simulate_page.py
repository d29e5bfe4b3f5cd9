"""The HTML page of a ``kvtrace simulate`` result: its charts and tables, one self-contained file.

It formats the ``kvtrace.simulate/1`` dict (docs/simulate.md) and never recomputes it. The page
template, the inlined Vega bundle and the chart style are the report's; the charts and tables are
those of the report's ``simulate`` section (:mod:`kvtrace.report.charts`, :mod:`kvtrace.report.tables`).
"""

from __future__ import annotations

from kvtrace.report.charts import occupancy_chart, throughput_chart, ttft_chart
from kvtrace.report.html import _e, _figure, _lib_versions, _table, _template, js_bundle
from kvtrace.report.tables import sim_run_line, sim_throughput_table, sim_tier_table, sim_ttft_table


def _tables(res: dict) -> str:
    return "".join(_table(t) for t in (sim_throughput_table(res), sim_tier_table(res), sim_ttft_table(res)))


def render_simulate_html(res: dict) -> str:
    """The page for one ``simulate()`` result."""
    charts = [c for c in (throughput_chart(res), occupancy_chart(res), ttft_chart(res)) if c is not None]
    body = "\n".join(["<h2>Serving model</h2>", _figure(charts[0]), _tables(res), *(_figure(c) for c in charts[1:])])
    footer = f"kvtrace simulate · schema {res['schema']} · charts drawn in this page by {_lib_versions()}, inlined"
    return _template().substitute(
        title=_e(f"kvtrace simulate: {res['scenario']}"),
        generator="kvtrace",
        window_line=_e(sim_run_line(res)),
        bundle=js_bundle(),
        body=body,
        footer=_e(footer),
        n_charts=len(charts),
    )
