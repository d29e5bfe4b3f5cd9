"""``kvtrace run PROFILE``: one period of a report profile (for cron, systemd timers, CronJobs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import guarded
from kvtrace.window import parse_instant
from kvtrace.units import fmt_int, fmt_usd
from kvtrace.schedule import load_profile, run_profile
from kvtrace.schedule.scheduler import utcnow

AtOpt = Annotated[
    Optional[str],
    typer.Option(
        "--at",
        help="Run as if it were this time (ISO; without an offset, in the profile's time zone), or a span back from now (1d): reports the period before it.",
    ),
]
ProfileDbOpt = Annotated[
    Optional[Path],
    typer.Option("--db", help="Warehouse file; overrides the profile's inputs.warehouse.", show_default=False),
]
OutRootOpt = Annotated[
    Optional[Path],
    typer.Option("--out-root", help="Output root; overrides the profile's output.root.", show_default=False),
]
WriteEmptyOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--write-empty/--skip-empty",
        help="Write a report for a period without requests too (default: the profile's "
        "output.write_empty, else skip it and say so).",
        show_default=False,
    ),
]


def run(
    profile: Annotated[
        str, typer.Argument(help="A profile TOML file, or the name of one in reports/profiles (daily, weekly).")
    ],
    at: AtOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the period's folder if it exists (atomically).")
    ] = False,
    db: ProfileDbOpt = None,
    out_root: OutRootOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
    write_empty: WriteEmptyOpt = None,
) -> None:
    """Ingest the profile's new inputs and write the report of its last complete period.

    Writes OUTROOT/<profile>/<period>/ (report.html, .json, .md, charts/*.png); rewrites OUTROOT/index.html.

    An existing period is never overwritten without --force; a period without requests is not
    written unless --write-empty (or output.write_empty in the profile).

    Example: kvtrace run reports/profiles/weekly.toml --at 2026-11-09
    """

    prof = load_profile(profile)
    when = parse_instant(at, utcnow(), prof.timezone) if at else None  # without an offset: the profile's zone
    res = run_profile(prof, at=when, force=force, warehouse=db, output_root=out_root, write_empty=write_empty)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "profile": res.profile,
                    "period": res.period.label,
                    "since": res.period.iso()[0],
                    "until": res.period.iso()[1],
                    "folder": None if res.no_data else str(res.folder),
                    "replaced": res.replaced,
                    "files": [str(f) for f in res.files],
                    "index": res.index and str(res.index),
                    "no_data": res.no_data,
                    "summary": res.summary,
                },
                indent=2,
            )
        )
        return
    if res.no_data:
        typer.echo(f"{res.period.label}: {res.no_data} No report written (pass --write-empty to write one).")
        return

    verb = "replaced" if res.replaced else "wrote"
    cost = res.summary.get("cost_usd")
    typer.echo(
        f"{verb} {res.folder}/ ({len(res.files)} files, {res.period.iso()[0]} → {res.period.iso()[1]}; "
        f"{fmt_int(res.summary.get('requests'))} requests"
        + ("" if cost is None else f", {fmt_usd(cost)} at list prices")
        + f"); index {res.index}"
    )


def register(app: typer.Typer) -> None:
    app.command("run")(guarded(run))
