"""``kvtrace report``: token mix, reuse/TTL and tier sections; terminal, JSON, Markdown or HTML."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, KvDtypeOpt, ModelOpt, OutOpt, SinceOpt, UntilOpt, guarded, model_option
from kvtrace.errors import ConfigError

FORMATS = ("table", "json", "md", "html")


def report(
    db: DbOpt = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table (terminal), json, md or html.")] = "table",
    out: OutOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    group_by: Annotated[Optional[list[str]], typer.Option("--group-by", "-g", help="day, hour, model, user, session, query_source, agent, project (repeat or comma-separate).")] = None,
    ttl: Annotated[Optional[list[str]], typer.Option("--ttl", help="TTL what-if and required capacity for these idle TTLs: 30s, 5m, 1h, 2d (repeat or comma-separate).")] = None,
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    tiers: Annotated[Optional[str], typer.Option("--tiers", help="Add a tier replay: a preset name or a tiers TOML file.")] = None,
    title: Annotated[str, typer.Option("--title", help="Report title.")] = "kvtrace report",
    ingest: Annotated[Optional[list[str]], typer.Option("--ingest", help="Ingest these files or folders first, in the same process (only what is new is read).")] = None,
) -> None:
    """Report the token mix (and, with --ttl / --tiers, reuse and capacity) of the warehouse.

    Example: kvtrace report --ingest ~/.claude/projects --ttl 5m,1h --group-by day --format html --out report.html
    """
    from kvtrace.report.build import ReportOptions, build_report
    from kvtrace.units import parse_durations
    from kvtrace.store import open_store

    if format not in FORMATS:
        raise ConfigError(f"unknown --format '{format}'", hint="choose table, json, md or html")
    groups = [g.strip() for item in (group_by or []) for g in item.split(",") if g.strip()]
    opts = ReportOptions(since=since, until=until, group_by=groups, ttls=parse_durations(ttl),
                         model=model_option(model, kv_dtype), tiers=tiers, title=title)
    if ingest:
        from kvtrace.ingest import ingest as run_ingest

        # Hold the write lock only while ingesting: the report itself reads, beside collectors.
        with open_store(db) as store:
            summary = run_ingest(store, ingest)
        if summary.lines_rejected:
            typer.echo(f"ingest skipped {summary.lines_rejected} bad lines (kvtrace ingest lists them)", err=True)
    with open_store(db, read_only=True) as store:
        rep = build_report(store, opts)
    write_report(rep.data, format, out)


def write_report(data: dict, format: str, out) -> None:
    """Render to ``out`` (a path) or stdout."""
    from kvtrace.report import render

    if format == "table" and out is None:
        render.render_terminal(data)
        return
    if format == "html":
        from kvtrace.report.html import render_html

        text = render_html(data)
    else:
        import io

        buf = io.StringIO()
        if format == "json":
            render.render_json(data, buf)
        elif format == "md":
            render.render_markdown(data, buf)
        else:
            from rich.console import Console

            render.render_terminal(data, Console(file=buf, width=120))
        text = buf.getvalue()
    if out is None:
        sys.stdout.write(text)
    else:
        from kvtrace.report.files import write_atomic

        write_atomic(out, text.encode())


def register(app: typer.Typer) -> None:
    app.command("report")(guarded(report))
