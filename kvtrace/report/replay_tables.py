"""Terminal tables of a :class:`~kvtrace.replay.engine.ReplayResult` (``kvtrace replay``).

The tables are the report's :class:`~kvtrace.report.tables.TableSpec` s (a replay's tiers and
TTFT are the report's ``tiers`` section), plus the capacity x TTL grid only this command shows.
"""

from __future__ import annotations
from kvtrace.report.render import print_tables
from kvtrace.report.tables import capacity_table, grid_table, tier_table, ttft_table
from kvtrace.units import fmt_bytes_compact, fmt_duration, fmt_tokens_compact


def render_table(res, console) -> None:
    """The replay result as terminal tables."""
    from dataclasses import replace

    tr = res.trace
    console.print(
        f"[bold]{tr['name']}[/]: {tr['requests']:,} requests, {tr['blocks']:,} block accesses of "
        f"{tr['block_size']} tokens, {tr['input_tokens']:,} input tokens over {fmt_duration(tr['span_s'])} "
        f"(engine {res.engine['kernel']}, {res.engine['total_s']:.2f} s)"
    )
    if res.sample:
        s = res.sample
        tiers_err = (
            "" if s.get("expected_error_tiers") is None else f", tier hit ratios ±{s['expected_error_tiers']:.2%}"
        )
        err = (
            "not estimated above a 50% rate"
            if s["expected_error"] is None
            else f"±{s['expected_error']:.2%} (mean absolute){tiers_err}"
        )
        size = f"fixed size {s['size_limit']:,} blocks, " if s["mode"] == "size" else ""
        console.print(
            f"[bold]Sampled[/] (SHARDS, {size}rate {s['rate']:.4g}): "
            f"{s['sampled_accesses']:,} of {s['block_accesses']:,} block accesses, "
            f"{s['heavy_blocks']:,} heavy blocks whole; expected error of the hit ratios {err}",
            highlight=False,
        )
    section = res.tiers_section()
    print_tables([grid_table(section)], console)
    ws = " · ".join(
        f"{fmt_duration(w['ttl_s'])}: {fmt_tokens_compact(w['peak_tokens'])}"
        + (f" ({fmt_bytes_compact(w['peak_bytes'])})" if w["peak_bytes"] is not None else "")
        for w in res.working_set
    )
    console.print(f"Peak working set by TTL (unlimited capacity): {ws}")
    print_tables([capacity_table(section)], console)
    tiers = tier_table(section, reads=True) if res.tiers else None
    if tiers is not None:
        tiers = replace(tiers, notes=[*tiers.notes, f"Peak rates over {fmt_duration(res.tiers['window_s'])} windows."])
    ttft = ttft_table(res.ttft) if res.ttft else None
    if ttft is not None:
        f = res.ttft
        ttft = replace(
            ttft,
            title=f"{ttft.title}: prefill by {f['prefill']['mode']}, "
            f"{'overlapped' if f['overlap'] else 'serial'} reload, "
            f"resumed after {fmt_duration(f['resume_gap_s'])}",
        )
    print_tables([tiers, ttft], console)
    for w in res.warnings:
        console.print(f"[yellow]Warning:[/] {w}", highlight=False)
