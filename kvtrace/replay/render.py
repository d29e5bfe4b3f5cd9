"""Terminal tables of a :class:`~kvtrace.replay.engine.ReplayResult` (``kvtrace replay``)."""

from __future__ import annotations


def render_table(res, console) -> None:
    """The replay result as terminal tables."""
    from rich.table import Table

    from kvtrace.units import fmt_bytes_compact, fmt_duration, fmt_tokens_compact

    tr = res.trace
    console.print(f"[bold]{tr['name']}[/]: {tr['requests']:,} requests, {tr['blocks']:,} block accesses of "
                  f"{tr['block_size']} tokens, {tr['input_tokens']:,} input tokens over {fmt_duration(tr['span_s'])} "
                  f"(engine {res.engine['kernel']}, {res.engine['total_s']:.2f} s)")
    ttls = list(dict.fromkeys(g["ttl_s"] for g in res.grid))
    caps = list(dict.fromkeys(g["capacity_tokens"] for g in res.grid))
    cell = {(g["capacity_tokens"], g["ttl_s"]): g for g in res.grid}
    t = Table(title="Hit ratio (tokens; blocks in brackets) by LRU capacity and idle TTL")
    t.add_column("capacity", justify="right")
    if res.model:
        t.add_column("bytes", justify="right")
    for x in ttls:
        t.add_column(f"TTL {fmt_duration(x)}", justify="right")
    for c in caps:
        row = [fmt_tokens_compact(c)]
        if res.model:
            row.append(fmt_bytes_compact(cell[(c, ttls[0])]["capacity_bytes"]))
        row += [f"{cell[(c, x)]['hit_ratio_tokens']:.2%} ({cell[(c, x)]['hit_ratio_blocks']:.2%})" for x in ttls]
        t.add_row(*row)
    console.print(t)
    ws = " · ".join(f"{fmt_duration(w['ttl_s'])}: {fmt_tokens_compact(w['peak_tokens'])}"
                    + (f" ({fmt_bytes_compact(w['peak_bytes'])})" if w["peak_bytes"] is not None else "")
                    for w in res.working_set)
    console.print(f"Peak working set by TTL (unlimited capacity): {ws}")
    if res.tiers:
        tt = res.tiers
        t = Table(title=f"Tiers {tt['name']} ({tt['mode']}, TTL {fmt_duration(tt['ttl_s'])}): "
                        f"{tt['hit_ratio_tokens']:.2%} of input tokens hit")
        for col in ("tier", "capacity", "hit (tokens)", "reads mean/peak", "writes mean/peak", "fills", "DWPD/drive",
                    "rating"):
            t.add_column(col, justify="left" if col == "tier" else "right")
        for x in tt["tiers"]:
            rate = lambda a, b: "-" if a is None else f"{fmt_bytes_compact(a)}/s / {fmt_bytes_compact(b)}/s"  # noqa: E731
            t.add_row(x["name"], f"{fmt_tokens_compact(x['capacity_tokens'])} ({fmt_bytes_compact(x['capacity_bytes'])})",
                      f"{x['hit_ratio_tokens']:.2%}", rate(x["read_bytes_per_s_mean"], x["read_bytes_per_s_peak"]),
                      rate(x["write_bytes_per_s_mean"], x["write_bytes_per_s_peak"]), x["fills_at"] or "never",
                      "-" if x.get("dwpd_per_drive") is None else f"{x['dwpd_per_drive']:.2f}",
                      "-" if x.get("dwpd_rating") is None else f"{x['dwpd_rating']:g}")
        console.print(t)
        console.print(f"Peak rates over {fmt_duration(tt['window_s'])} windows.")
    if res.ttft:
        f = res.ttft
        t = Table(title=f"Modelled TTFT (ms; prefill by {f['prefill']['mode']}, "
                        f"{'overlapped' if f['overlap'] else 'serial'} reload; resumed after {fmt_duration(f['resume_gap_s'])})")
        for col in ("requests", "count", "p50", "p90", "p99", "max", "p50 without cache", "p99 without cache"):
            t.add_column(col, justify="left" if col == "requests" else "right")
        for name in ("all", "continuing", "resumed", "new"):
            s = f[name]
            if s["count"]:
                t.add_row(name, f"{s['count']:,}", *(f"{s[k]:,.0f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")),
                          f"{s['no_cache']['p50_ms']:,.0f}", f"{s['no_cache']['p99_ms']:,.0f}")
        console.print(t)
        avoided = ", ".join(f"{k} {v:,.0f}" for k, v in f["gpu_seconds_avoided"].items())
        console.print(f"GPU-seconds of prefill avoided per tier: {avoided} "
                      f"(of {f['gpu_seconds_no_cache']:,.0f} without any cache)")
