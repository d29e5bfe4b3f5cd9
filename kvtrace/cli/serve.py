"""``kvtrace serve``: keep kvtrace loaded so that commands on a warehouse start in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, guarded
from kvtrace.units import parse_duration
from kvtrace.launch import run_here
from kvtrace.wire.paths import resolve_db
from kvtrace.serve import server


def serve(
    db: DbOpt = None,
    stop: Annotated[
        bool, typer.Option("--stop", help="Stop the server of this warehouse (waits for a running command).")
    ] = False,
    status: Annotated[
        bool, typer.Option("--status", help="Print the server's status as JSON (exit 1 if none runs).")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Run in the background; return once it answers (log: DB.serve.log).")
    ] = False,
    idle_exit: Annotated[
        Optional[str], typer.Option("--idle-exit", help="Stop after this long without a command: 30m, 8h.")
    ] = None,
    log: Annotated[Optional[Path], typer.Option("--log", help="With --detach: the server's log file.")] = None,
) -> None:
    """Keep kvtrace loaded in a resident process, so commands on a warehouse start in milliseconds.

    The kvtrace CLI hands warehouse commands (ingest, report, query, export, lake, reuse, replay,
    size, run --db) to the server, which runs each in a fork of itself with the libraries already
    loaded, with your terminal, environment and working folder, instead of starting Python afresh.
    Output and exit codes are the same as without it; when no server answers, commands run in
    their own process as usual. The server does not hold the warehouse between commands.

    Stop it with Ctrl-C, SIGTERM or `kvtrace serve --stop`. Runs in the foreground (for systemd,
    see collectors/) unless --detach.

    Example: kvtrace serve --db team.duckdb --detach --idle-exit 8h && kvtrace report --db team.duckdb --ingest ~/.claude/projects
    """

    if stop:
        typer.echo(server.stop(db))
        return
    if status:
        info = server.status(db)
        if info is None:
            typer.echo("no kvtrace serve answers for this warehouse", err=True)
            raise typer.Exit(1)
        typer.echo(json.dumps(info, indent=2))
        return
    idle = parse_duration(idle_exit, what="--idle-exit") if idle_exit else None
    if detach:
        log_path = log or Path(resolve_db(db) + ".serve.log")
        info = server.detach(db, idle_exit, log_path)
        typer.echo(f"kvtrace serve: pid {info['pid']} serving {info['db']} (log {log_path})")
        return
    from kvtrace.cli import command

    command()  # the click command, built once here: every command's fork inherits it
    srv = server.Server(db, run=run_here, idle_exit=idle)
    srv.start()
    srv.serve_forever()


def register(app: typer.Typer) -> None:
    app.command("serve")(guarded(serve))
