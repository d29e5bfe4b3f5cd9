"""Renderers of ``Report.data``: terminal (rich), JSON and Markdown. They format, never compute.

Both walk the sections of :mod:`kvtrace.report.registry` in reading order: each section's
tables (from :mod:`kvtrace.report.tables`), then its warnings. The HTML page draws the same
tables, with the charts, in ``kvtrace.report.html``.
"""

from __future__ import annotations

import json
from typing import IO

from kvtrace.units import fmt_int, fmt_pct, fmt_usd
from kvtrace.report import registry


def window_text(d: dict) -> str:
    w = d["window"]
    first, last = w["first_request"] or "–", w["last_request"] or "–"
    return f"{first} → {last}"


def headline(d: dict) -> str:
    cost = (d.get("cost") or {}).get("cost_usd")
    return (
        f"{fmt_int(d['requests'])} requests · {fmt_int(d['sessions'])} sessions · "
        f"cache hit ratio (token-weighted) {fmt_pct(d['token_mix']['cache_hit_ratio'])}"
        + ("" if cost is None else f" · cost {fmt_usd(cost)} at list prices")
    )


def render_json(d: dict, out: IO[str]) -> None:
    json.dump(d, out, indent=2, sort_keys=False, default=str)
    out.write("\n")


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_markdown(d: dict, out: IO[str]) -> None:
    w = out.write
    if d.get("no_data"):
        w(f"# {d['title']}\n\n{d['no_data']}\n")
        return
    w(f"# {d['title']}\n\nWindow (UTC): {window_text(d)} · {headline(d)}\n\n")
    for section in registry.SECTIONS:
        for t in registry.section_tables(section, d):
            w(f"## {t.title}\n\n")
            w("| " + " | ".join(map(_md_cell, t.headers)) + " |\n")
            w("|" + "|".join(["---"] + ["---:"] * (len(t.headers) - 1)) + "|\n")
            for row in t.rows:
                w("| " + " | ".join(map(_md_cell, row)) + " |\n")
            if t.foot:
                w("| " + " | ".join(f"**{_md_cell(c)}**" for c in t.foot) + " |\n")
            w("\n")
            for note in t.notes:
                w(f"{note}\n\n")
        for warning in section.warnings(d):
            w(f"**Warning:** {warning}\n\n")


def print_tables(specs, console) -> None:
    """Draw :class:`~kvtrace.report.tables.TableSpec` s with rich (``None`` entries are skipped):
    the first column left, numbers right, the total row bold, the notes under each table. A table
    without a title of its own has its section's."""
    from rich.table import Table

    for t in specs:
        if t is None:
            continue
        t = registry.titled(t)
        table = Table(title=t.title, title_justify="left")
        for i, h in enumerate(t.headers):
            # a number is never cut: it wraps onto a second line rather than ending in "…"
            table.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
        for row in t.rows:
            table.add_row(*row)
        if t.foot:
            table.add_row(*(f"[bold]{c}[/bold]" for c in t.foot))
        console.print(table)
        for note in t.notes:
            console.print(note)


def render_terminal(d: dict, console=None) -> None:
    from rich.console import Console

    if console is None:
        console = Console()
        if not console.is_terminal:  # a pipe or a file: no width to fit, so do not squeeze tables
            console = Console(width=160)
    console.print(f"[bold]{d['title']}[/bold]  {window_text(d)}")
    if d.get("no_data"):
        console.print(d["no_data"], markup=False)
        return
    console.print(headline(d))
    for section in registry.SECTIONS:
        print_tables(registry.section_tables(section, d), console)
        for w in section.warnings(d):
            console.print(f"[yellow]Warning:[/] {w}", highlight=False)
