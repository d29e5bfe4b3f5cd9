"""The ``kvtrace`` command line: thin typer commands over the library.

Each command lives in its own module and imports heavy libraries (Altair, numba, DuckDB, ...)
inside its function, so ``kvtrace --help`` and ``kvtrace ingest`` do not pay for charting or JIT
start-up; kvtrace's own modules are imported at the top (``tests/test_layers.py``).
"""

from __future__ import annotations

import functools
import sys

import typer
import typer.main

from kvtrace.cli._options import fail
from kvtrace.errors import KvtraceError, exit_code
from kvtrace.launch import exit_flushed, interrupted, tell_interrupted
from kvtrace import __version__

app = typer.Typer(
    name="kvtrace",
    help="Token telemetry of agentic AI traffic -> token mix, context reuse, KV-cache TTL and tier sizing.\n\n"
    "Example: kvtrace ingest otel.jsonl ~/.claude/projects && kvtrace report --ttl 5m,1h",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvtrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print kvtrace's version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """kvtrace: token mix, context reuse, KV-cache TTL and tier sizing for agentic AI traffic."""


# One line per command module (keep alphabetical).
from kvtrace.cli import collect as _collect  # noqa: E402
from kvtrace.cli import export as _export  # noqa: E402
from kvtrace.cli import ingest as _ingest  # noqa: E402
from kvtrace.cli import lake as _lake  # noqa: E402
from kvtrace.cli import query as _query  # noqa: E402
from kvtrace.cli import replay as _replay  # noqa: E402
from kvtrace.cli import report as _report  # noqa: E402
from kvtrace.cli import reuse as _reuse  # noqa: E402
from kvtrace.cli import run as _run  # noqa: E402
from kvtrace.cli import schedule as _schedule  # noqa: E402
from kvtrace.cli import serve as _serve  # noqa: E402
from kvtrace.cli import simulate as _simulate  # noqa: E402
from kvtrace.cli import size as _size  # noqa: E402
from kvtrace.cli import synth as _synth  # noqa: E402

_collect.register(app)
_export.register(app)
_ingest.register(app)
_lake.register(app)
_query.register(app)
_replay.register(app)
_report.register(app)
_reuse.register(app)
_run.register(app)
_schedule.register(app)
_serve.register(app)
_simulate.register(app)
_size.register(app)
_synth.register(app)


@functools.cache
def command():
    """The click command of ``app``, built once per process: typer builds it anew (~50 ms of
    annotation evaluation) on every ``app()``. It depends only on ``app``, which is complete once
    this module is imported; ``kvtrace serve`` builds it before forking (``cli/serve.py``)."""
    return typer.main.get_command(app)


def main(prog_name: str | None = None) -> None:
    """Console entry point: library errors become one ``Error: ...`` line and exit 1; Ctrl-C one
    ``Interrupted: ...`` line and exit 130. ``prog_name``: the name usage lines show (default:
    as click detects it from ``sys.argv``)."""
    try:
        command().main(prog_name=prog_name)
    except KvtraceError as e:
        _exit(fail(e))
    except SystemExit as e:
        if e.code == 130 and interrupted():
            tell_interrupted("Interrupted: stopped before the command finished")
        _exit(e.code)
    except BaseException as e:
        if not interrupted(e):
            raise
        tell_interrupted("Interrupted: stopped before the command finished")
        _exit(130)
    _exit(0)


def _exit(code) -> None:
    """Exit without the interpreter's teardown when nothing is left running.

    Freeing every module and object of a run that loaded DuckDB, Arrow and NumPy takes 50-100 ms
    (a tenth of a first ingest of a 300 MB transcript tree). Commands close their warehouse and
    files themselves; the atexit handlers still run and the standard streams are flushed. With
    another thread still alive, exit normally (the interpreter waits for it).
    """
    import atexit
    import threading

    if threading.active_count() > 1:
        sys.exit(code)

    code = exit_code(code)
    atexit._run_exitfuncs()
    exit_flushed(code)
