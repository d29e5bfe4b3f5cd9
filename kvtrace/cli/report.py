"""``kvtrace report``: token mix, reuse/TTL and tier sections; terminal, JSON, Markdown, HTML, or the
charts alone as PNG/SVG files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import (
    DbOpt,
    InputFormatOpt,
    KvDtypeOpt,
    ModelOpt,
    OutOpt,
    SinceOpt,
    UntilOpt,
    guarded,
    working,
    model_option,
)
from kvtrace.errors import ConfigError, NoData
from kvtrace.units import parse_duration, parse_durations
from kvtrace.report.output import FORMATS, IMAGE_FORMATS, render_text, write_report
from kvtrace.report.render import render_terminal
from kvtrace.units import fmt_bytes


def report(
    db: DbOpt = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="table (terminal), json, md, html; or png / svg: each chart as a file in the --out folder.",
        ),
    ] = "table",
    out: OutOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    group_by: Annotated[
        Optional[list[str]],
        typer.Option(
            "--group-by",
            "-g",
            help="hour, day, week, month, model, user, session, query_source, agent, project (repeat or comma-separate); each row has its cost at list prices.",
        ),
    ] = None,
    timezone: Annotated[
        str,
        typer.Option(
            "--timezone",
            "--tz",
            help="IANA time zone of hour/day/week/month boundaries and of --since/--until without an offset: UTC, Europe/Berlin, America/New_York.",
        ),
    ] = "UTC",
    pricing: Annotated[
        Optional[Path],
        typer.Option(
            "--pricing", help="Pricing TOML for the cost columns and the spend what-if (default: built-in list prices)."
        ),
    ] = None,
    ttl: Annotated[
        Optional[list[str]],
        typer.Option(
            "--ttl",
            help="TTL what-if and required capacity for these idle TTLs: 30s, 5m, 1h, 2d (repeat or comma-separate).",
        ),
    ] = None,
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    tiers: Annotated[
        Optional[str],
        typer.Option(
            "--tiers",
            help="Add a tier replay: a preset name or a tiers TOML file; with the capacity reaching 90/99/100% of each TTL's hit ratio and where each tier lands.",
        ),
    ] = None,
    tier_ttl: Annotated[
        Optional[str],
        typer.Option(
            "--tier-ttl",
            help="Idle TTL of the tier replay: 5m, 1h, none (default: the one --ttl if exactly one is given, else none).",
        ),
    ] = None,
    simulate: Annotated[
        Optional[list[str]],
        typer.Option(
            "--simulate",
            help="Add the serving model (kvtrace simulate) of the window's sessions under this configuration: [NAME=]TIERS[:TIER,TIER], e.g. dram=seed-testbed:HBM,DRAM (the first tier is the GPU's; --model is the served model). Repeat to compare; ratios are to the first.",
        ),
    ] = None,
    title: Annotated[str, typer.Option("--title", help="Report title.")] = "kvtrace report",
    ingest: Annotated[
        Optional[list[str]],
        typer.Option(
            "--ingest", help="Ingest these files or folders first, in the same process (only what is new is read)."
        ),
    ] = None,
    input_format: InputFormatOpt = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 1 (writing nothing) when the window or warehouse holds no requests, instead of a report that says so.",
        ),
    ] = False,
) -> None:
    """Report the token mix (and, with --ttl / --tiers, reuse and capacity) of the warehouse.

    With --format png or svg, --out names a folder: each chart is written there as <chart>.png (or
    .svg), titled with the report's title and period, ready to paste into a slide.

    Example: kvtrace report --ingest ~/.claude/projects --ttl 5m,1h --group-by day --format html --out report.html

    Example: kvtrace report --ttl 5m,1h --tiers seed-testbed --model MiniMax-M2.7:fp8 --format png --out charts/

    Example: kvtrace report --group-by week,month --timezone Europe/Berlin

    Example: kvtrace report --ttl 5m,1h --tier-ttl 1h --tiers seed-testbed --model MiniMax-M2.7:fp8

    Example: kvtrace report --simulate gpu=seed-testbed:HBM --simulate dram=seed-testbed:HBM,DRAM --model MiniMax-M2.7 --format html --out report.html
    """
    from kvtrace.report.build import ReportOptions, build_report
    from kvtrace.store import open_store

    if format not in FORMATS:
        raise ConfigError(f"unknown --format '{format}'", hint="choose table, json, md, html, png or svg")
    if format in IMAGE_FORMATS and (out is None or out.suffix.lower() in (".png", ".svg") or out.is_file()):
        raise ConfigError(
            f"--format {format} writes one file per chart, so --out must name a folder"
            + (f", not '{out}'" if out is not None else ""),
            hint=f"for example: --format {format} --out charts/",
        )
    if input_format and not ingest:
        raise ConfigError("--input-format is the format of the --ingest files", hint="add --ingest PATH, or drop it")
    groups = [g.strip() for item in (group_by or []) for g in item.split(",") if g.strip()]
    if simulate:
        from kvtrace.simulate.run import check_configs, parse_config

        # checked before any ingest or analysis runs
        check_configs([parse_config(c, option="--simulate") for c in simulate], option="--simulate")
    opts = ReportOptions(
        since=since,
        until=until,
        group_by=groups,
        ttls=parse_durations(ttl),
        model=model_option(model, kv_dtype),
        tiers=tiers,
        title=title,
        timezone=timezone,
        tier_ttl=None if tier_ttl is None else parse_duration(tier_ttl, what="--tier-ttl", unlimited=True),
        pricing=None if pricing is None else str(pricing),
        simulate=list(simulate or []),
    )
    if ingest:
        from kvtrace.ingest import ingest as run_ingest

        # Hold the write lock only while ingesting: the report itself reads, beside collectors.
        with open_store(db) as store:
            summary = run_ingest(store, ingest, format=input_format)
        if summary.lines_rejected:
            typer.echo(f"ingest skipped {summary.lines_rejected} bad lines (kvtrace ingest lists them)", err=True)
    with open_store(db, read_only=True) as store, working("building the report"):
        rep = build_report(store, opts)  # prefix chains over millions of requests take a minute
    empty = rep.data["no_data"]
    if empty and strict:
        raise NoData(empty, hint="--strict asks for data; widen --since/--until or ingest more")
    _write(rep.data, format, out)
    if empty and format not in IMAGE_FORMATS and (out is not None or format != "table"):  # said already
        typer.echo(empty, err=True)


def _write(data: dict, format: str, out) -> None:
    """Render to ``out`` (a path; a folder for images) or stdout, and say what was written."""

    if out is None:
        if format == "table":
            render_terminal(data)
        else:
            sys.stdout.write(render_text(data, format))
        return
    written = write_report(data, format, out)
    if format in IMAGE_FORMATS:
        if written:
            typer.echo(f"wrote {len(written)} charts to {out}/: " + ", ".join(p.name for p in written), err=True)
        else:
            typer.echo(f"no charts written to {out}/: the window has no requests", err=True)
        return
    typer.echo(f"wrote the {format} report ({fmt_bytes(written[0].stat().st_size)}) to {out}", err=True)


def register(app: typer.Typer) -> None:
    app.command("report")(guarded(report))
