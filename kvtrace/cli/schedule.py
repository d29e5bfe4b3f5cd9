"""``kvtrace schedule PROFILE...``: run report profiles on their cron expressions until stopped."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvtrace.cli._options import guarded
from kvtrace.cli.run import OutRootOpt, ProfileDbOpt, WriteEmptyOpt
from kvtrace.schedule import load_profile
from kvtrace.schedule.scheduler import schedule as loop


def schedule(
    profiles: Annotated[list[str], typer.Argument(help="Profile TOML files or names in reports/profiles.")],
    once: Annotated[
        bool, typer.Option("--once", help="Run what is due now (the catch-up of a missed period), then exit.")
    ] = False,
    max_runs: Annotated[Optional[int], typer.Option("--max-runs", help="Exit after this many runs.", min=1)] = None,
    db: ProfileDbOpt = None,
    out_root: OutRootOpt = None,
    write_empty: WriteEmptyOpt = None,
) -> None:
    """Run profiles on their schedule.cron expressions (UTC) until stopped (Ctrl-C, SIGTERM).

    At start-up, a profile whose latest slot has no report yet runs once (the catch-up).

    Older missed periods are left to `kvtrace run PROFILE --at`; a failed run is reported and the loop goes on.

    Example: kvtrace schedule daily weekly --out-root /srv/kvtrace/reports
    """
    import signal

    profs = [load_profile(p) for p in profiles]

    def report(kind, prof, slot, what):
        stamp = slot.isoformat(timespec="minutes") + "Z"
        if kind == "ran" and what.no_data:
            typer.echo(f"{stamp} {prof.name}: {what.period.label} has no requests, no report written")
        elif kind == "ran":
            typer.echo(f"{stamp} {prof.name}: {'replaced' if what.replaced else 'wrote'} {what.folder}/")
        elif kind == "skipped":
            typer.echo(f"{stamp} {prof.name}: {what}/ exists, nothing to catch up")
        else:
            typer.echo(f"{stamp} {prof.name}: failed: {what}", err=True)

    def stop(signum, frame):
        raise KeyboardInterrupt  # a run in progress removes its temporary folder on the way out

    # SIGTERM (systemctl stop, a Kubernetes pod shutting down) ends the loop like Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, stop)
    kwargs = {
        k: v for k, v in (("warehouse", db), ("output_root", out_root), ("write_empty", write_empty)) if v is not None
    }
    try:
        n = loop(profs, once=once, max_runs=max_runs, on_event=report, **kwargs)
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)
        return
    finally:
        signal.signal(signal.SIGTERM, previous)
    typer.echo(f"{n} run(s)")


def register(app: typer.Typer) -> None:
    app.command("schedule")(guarded(schedule))
