"""Options shared by several commands (one definition, one help text)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

DbOpt = Annotated[Optional[Path], typer.Option(
    "--db", envvar="KVTRACE_DB", help="Warehouse file (default ./kvtrace.duckdb; env KVTRACE_DB).",
    show_default=False)]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Write to this file instead of stdout.")]
SinceOpt = Annotated[Optional[str], typer.Option(
    "--since", help="Start of the window (ISO date/time, UTC, inclusive), or a span back from the last record: 7d, 24h.")]
UntilOpt = Annotated[Optional[str], typer.Option("--until", help="End of the window (ISO date/time, UTC, exclusive).")]


def guarded(fn):
    """Wrap a command so library errors print one ``Error: ...`` line and exit 1 (CliRunner too)."""
    import functools

    from kvtrace.errors import KvtraceError

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KvtraceError as e:
            typer.echo(f"Error: {e}", err=True)
            raise typer.Exit(1) from e

    return wrapper
