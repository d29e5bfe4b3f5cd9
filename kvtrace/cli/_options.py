"""Options shared by several commands (one definition, one help text)."""

from __future__ import annotations

from pathlib import Path
import sys
from typing import Annotated, Optional

import typer

from kvtrace.ingest.formats import FORMATS
from kvtrace.report.files import write_atomic
from kvtrace.errors import ConfigError, Interrupted, KvtraceError
from kvtrace.launch import interrupted, tell_interrupted

DbOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--db",
        envvar="KVTRACE_DB",
        help="Warehouse file (default ./kvtrace.duckdb; env KVTRACE_DB).",
        show_default=False,
    ),
]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Write to this file instead of stdout.")]
SinceOpt = Annotated[
    Optional[str],
    typer.Option(
        "--since",
        help="Start of the window (ISO date/time, UTC, inclusive), or a span back from the last record: 7d, 24h.",
    ),
]
InputFormatOpt = Annotated[
    Optional[str],
    typer.Option(
        "--input-format",
        "-i",
        help="Read every input file as this format instead of detecting it: " + ", ".join(FORMATS) + ".",
        show_default=False,
    ),
]
UntilOpt = Annotated[Optional[str], typer.Option("--until", help="End of the window (ISO date/time, UTC, exclusive).")]
ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        help="KV geometry for bytes: a catalog model (kvtrace size --list) or a config.json path, with its "
        "KV cache dtype as a suffix or through --kv-dtype: MiniMax-M2.7:fp8 (default bf16).",
    ),
]
KvDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--kv-dtype",
        help="KV cache dtype of --model: bf16 (default) or fp8; the same as --model NAME:fp8.",
        show_default=False,
    ),
]


def model_option(model: str | None, kv_dtype: str | None) -> str | None:
    """``--model`` and ``--kv-dtype`` as one model spec (``NAME`` or ``NAME:DTYPE``), checked
    against the catalog now (an unknown model fails before any work)."""
    from kvtrace.replay.catalog import model_spec, resolve_model

    if model is None:
        if kv_dtype is not None:
            raise ConfigError("--kv-dtype needs --model", hint="e.g. --model MiniMax-M2.7 --kv-dtype fp8")
        return None
    spec = model_spec(model, kv_dtype)
    resolve_model(spec)
    return spec


def working(description: str):
    """A spinner with the elapsed time on stderr while a long step runs (``with working(...):``),
    only when stderr is a terminal: a replay of a big trace is not silent for a minute."""
    import contextlib

    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        return contextlib.nullcontext()
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn(description), TimeElapsedColumn(), console=console, transient=True)
    bar.add_task(description, total=None)
    return bar


class progress_bar:
    """``with progress_bar("replaying") as report:`` a bar with the step, elapsed time and an ETA
    on stderr, ``report(done, step)`` moving it (``done`` out of ``total``; with ``count``, the
    bar also shows the whole steps done, ``M/N``; ``step``: the first step's name, shown from the
    first frame); ``report`` is None when stderr is not a
    terminal (nothing is shown, and the work need not measure its progress)."""

    def __init__(self, description: str, total: float = 1.0, count: bool = False, step: str = "") -> None:
        from rich.console import Console

        self.description, self.total, self.step, self.bar, self.task = description, total, step, None, None
        console = Console(stderr=True)
        if console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            columns = [TextColumn(description), TextColumn("[bold]{task.fields[step]}"), BarColumn()]
            columns += [MofNCompleteColumn()] if count else []
            columns += [TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), TimeRemainingColumn()]
            self.bar = Progress(*columns, console=console, transient=True)

    def __enter__(self):
        if self.bar is None:
            return None
        self.bar.__enter__()
        self.task = self.bar.add_task(self.description, total=self.total, step=self.step)  # drawn at once
        return self.report

    def report(self, done: float, step: str = "") -> None:
        self.bar.update(self.task, completed=done, step=step)

    def __exit__(self, *exc) -> bool:
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


def fail(e: Exception) -> int:
    """Print a library error as one line (``Error: ...``, or ``Interrupted: ...`` for Ctrl-C) and
    return its exit code."""

    if isinstance(e, Interrupted):
        tell_interrupted(f"Interrupted: {e}")
    else:
        typer.echo(f"Error: {e}", err=True)
    return e.exit_code


def guarded(fn):
    """Wrap a command so library errors print one ``Error: ...`` line and exit 1 (CliRunner too),
    and Ctrl-C prints one ``Interrupted: ...`` line and exits 130, whatever the library it
    interrupted raised on the way out."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except BaseException as e:
            if isinstance(e, Interrupted) or (isinstance(e, KvtraceError) and not interrupted()):
                raise typer.Exit(fail(e)) from e
            if not interrupted(e):
                raise
            raise typer.Exit(fail(Interrupted("stopped before the command finished"))) from e

    return wrapper


def emit_text(text: str, out: Path | None) -> None:
    """A rendered output to ``out`` (written atomically: a reader never sees half of it) or stdout."""
    if out is None:
        sys.stdout.write(text)
    else:
        write_atomic(out, text.encode())
