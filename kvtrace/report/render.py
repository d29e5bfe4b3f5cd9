"""Renderers of ``Report.data``: terminal (rich), JSON and Markdown. They format, never compute.

HTML lives in ``kvtrace.report.html`` (it needs the chart libraries).
"""

from __future__ import annotations

import json
from typing import IO

CLASS_LABELS = {
    "cache_read": "Cache read",
    "cache_write_5m": "Cache write (5 min)",
    "cache_write_1h": "Cache write (1 h)",
    "cache_write_unknown": "Cache write (TTL unknown)",
    "output": "Output",
    "input_uncached": "Uncached input",
}


def fmt_int(n: int | float | None) -> str:
    return "–" if n is None else f"{int(round(n)):,}"


def fmt_pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def fmt_duration(s: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{int(s // size)}{unit}"
    return f"{s:g}s"


def fmt_tokens(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def mix_rows(mix: dict) -> list[tuple[str, str, str]]:
    """(label, tokens, share) rows of a token mix; zero write classes are left out."""
    rows = []
    for key, label in CLASS_LABELS.items():
        if key.startswith("cache_write") and not mix[key]:
            continue
        rows.append((label, fmt_int(mix[key]), fmt_pct(mix["shares"][key])))
    return rows


def window_text(d: dict) -> str:
    w = d["window"]
    first, last = w["first_request"] or "–", w["last_request"] or "–"
    return f"{first} → {last}"


def ttl_rows(d: dict) -> list[tuple[str, ...]]:
    rows = []
    for e in d.get("ttl", []):
        ws = e["working_set"]
        rows.append((fmt_duration(e["ttl_s"]), fmt_pct(e["hit_ratio_tokens"]), fmt_pct(e["hit_ratio_blocks"]),
                     fmt_tokens(ws["mean_tokens"]), fmt_tokens(ws["p99_tokens"]), fmt_tokens(ws["peak_tokens"]),
                     fmt_bytes(ws.get("peak_bytes"))))
    return rows


TTL_HEADERS = ("TTL", "Hit (tokens)", "Hit (blocks)", "Working set mean", "p99", "peak", "peak bytes")


def render_json(d: dict, out: IO[str]) -> None:
    json.dump(d, out, indent=2, sort_keys=False, default=str)
    out.write("\n")


def render_markdown(d: dict, out: IO[str]) -> None:
    w = out.write
    w(f"# {d['title']}\n\n")
    w(f"Window: {window_text(d)} · {fmt_int(d['requests'])} requests · {fmt_int(d['sessions'])} sessions · "
      f"cache hit ratio (token-weighted) {fmt_pct(d['token_mix']['cache_hit_ratio'])}\n\n")
    w("## Token mix\n\n| Class | Tokens | Share |\n|---|---:|---:|\n")
    for label, tok, share in mix_rows(d["token_mix"]):
        w(f"| {label} | {tok} | {share} |\n")
    w(f"| **Total** | **{fmt_int(d['token_mix']['total'])}** | 100% |\n\n")
    for g, entries in d.get("groups", {}).items():
        w(f"## By {g}\n\n| {g} | Requests | Total tokens | Read share | Cache write | Output | Hit ratio |\n"
          "|---|---:|---:|---:|---:|---:|---:|\n")
        for e in entries:
            m = e["token_mix"]
            writes = m["cache_write_5m"] + m["cache_write_1h"] + m["cache_write_unknown"]
            w(f"| {e['key']} | {fmt_int(e['requests'])} | {fmt_int(m['total'])} | {fmt_pct(m['shares']['cache_read'])} "
              f"| {fmt_int(writes)} | {fmt_int(m['output'])} | {fmt_pct(m['cache_hit_ratio'])} |\n")
        w("\n")
    if d.get("ttl"):
        w("## TTL what-if (unlimited capacity)\n\n| " + " | ".join(TTL_HEADERS) + " |\n|" + "---|" * len(TTL_HEADERS) + "\n")
        for row in ttl_rows(d):
            w("| " + " | ".join(row) + " |\n")
        w("\n")


def render_terminal(d: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    mix = d["token_mix"]
    console.print(f"[bold]{d['title']}[/bold]  {window_text(d)}")
    console.print(f"{fmt_int(d['requests'])} requests · {fmt_int(d['sessions'])} sessions · "
                  f"cache hit ratio (token-weighted) [bold]{fmt_pct(mix['cache_hit_ratio'])}[/bold]")
    t = Table(title="Token mix", title_justify="left")
    t.add_column("Class")
    t.add_column("Tokens", justify="right")
    t.add_column("Share", justify="right")
    for row in mix_rows(mix):
        t.add_row(*row)
    t.add_row("[bold]Total[/bold]", f"[bold]{fmt_int(mix['total'])}[/bold]", "100%")
    console.print(t)
    for g, entries in d.get("groups", {}).items():
        gt = Table(title=f"By {g}", title_justify="left")
        for col in (g, "Requests", "Total tokens", "Read share", "Cache write", "Output", "Hit ratio"):
            gt.add_column(col, justify="left" if col == g else "right")
        for e in entries:
            m = e["token_mix"]
            writes = m["cache_write_5m"] + m["cache_write_1h"] + m["cache_write_unknown"]
            gt.add_row(str(e["key"]), fmt_int(e["requests"]), fmt_int(m["total"]), fmt_pct(m["shares"]["cache_read"]),
                       fmt_int(writes), fmt_int(m["output"]), fmt_pct(m["cache_hit_ratio"]))
        console.print(gt)
    if d.get("ttl"):
        tt = Table(title="TTL what-if (unlimited capacity, idle TTL refreshed on use)", title_justify="left")
        for col in TTL_HEADERS:
            tt.add_column(col, justify="right")
        for row in ttl_rows(d):
            tt.add_row(*row)
        console.print(tt)
