"""The ``kvtrace`` console entry: hand the command to a running ``kvtrace serve``, else run it here.

Standard library only, and nothing but one ``stat`` when no server runs: a warehouse command
whose warehouse (``--db``, ``$KVTRACE_DB`` or ``./kvtrace.duckdb``) has a serve socket beside it
is forwarded to that server, which runs it in a fork of itself with the heavy modules imported,
so a repeat report skips most of a Python start-up. Everything else, and any command
the server does not take, runs in this process exactly as before.
"""

from __future__ import annotations

import os
import signal
import sys

from kvtrace.wire import protocol
from kvtrace.wire.paths import served


def db_arg(argv: list[str]) -> tuple[bool, str | None]:
    """Whether ``--db`` is given, and its value (the last one wins, as in click)."""
    found, value = False, None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a == "--db" and i + 1 < len(argv):
            found, value = True, argv[i + 1]
        elif a.startswith("--db="):
            found, value = True, a[len("--db=") :]
    return found, value


def forward_target(argv: list[str], environ=None) -> tuple[str, str] | None:
    """``(socket path, warehouse real path)`` when ``argv`` should go to a server, else None."""
    environ = os.environ if environ is None else environ
    if not argv or argv[0] not in protocol.FORWARDED or environ.get("KVTRACE_NO_SERVE"):
        return None
    if protocol.runs_here(argv):
        return None
    given, db = db_arg(argv)
    if argv[0] == "run" and not given:
        return None  # the profile names its warehouse; only an explicit --db is known here

    return served(db, environ)


def prog_name() -> str:
    """The program name click would show in usage lines (``kvtrace`` or ``python -m kvtrace``)."""
    main = sys.modules.get("__main__")
    path = sys.argv[0] if sys.argv else "kvtrace"
    package = getattr(main, "__package__", None)
    if not package:
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    module = package if name == "__main__" else f"{package}.{name}"
    return f"python -m {module.lstrip('.')}"


_sigints = 0


def _on_sigint(signum, frame) -> None:
    """Ctrl-C: the first interrupts the command (KeyboardInterrupt, or DuckDB's interrupt of the
    statement it runs); a second while it rolls back is ignored so the rollback and the one-line
    summary finish; a third leaves at once (committed data is safe: an open transaction is never
    written to the file)."""
    global _sigints
    _sigints += 1
    if _sigints == 1:
        raise KeyboardInterrupt
    if _sigints >= 3:
        os._exit(130)


def interrupted(exc: BaseException | None = None) -> bool:
    """Whether the command is ending because of Ctrl-C: a SIGINT arrived, or ``exc`` is the
    interruption itself (KeyboardInterrupt; DuckDB's InterruptException). Whatever a library
    raised on the way out (a failed statement of an aborted transaction, a query interrupted
    inside Arrow) then counts as the interruption, not as an error of its own."""
    if _sigints or isinstance(exc, KeyboardInterrupt):
        return True
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(exc, duckdb.InterruptException)


_told = False


def tell_interrupted(line: str) -> None:
    """Print the one line that says what an interrupted command kept (only the first is printed)."""
    global _told
    if not _told:
        _told = True
        print(line, file=sys.stderr, flush=True)


def main() -> None:
    argv = sys.argv[1:]
    target = forward_target(argv)
    if target is not None:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
        from kvtrace.wire.client import forward  # _socket: ~5 ms a command without a server would pay

        code = forward(target[0], argv, target[1], prog_name())
        if code is not None:
            exit_flushed(code)  # no teardown: ~1 ms of a ~15 ms client process
    run_here()


def run_here(prog_name: str | None = None) -> None:
    """Run ``sys.argv`` in this process (a plain run, or the process ``kvtrace serve`` forks for a
    forwarded command, with the client's ``prog_name``); never returns."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        from kvtrace.cli import main as run_cli
    except KeyboardInterrupt:
        tell_interrupted("Interrupted: stopped while starting; nothing was written")
        exit_flushed(130)
    run_cli(prog_name)


def exit_flushed(code: int) -> None:
    """Flush the standard streams and leave the process at once (``os._exit``)."""
    try:
        sys.stdout.flush()
    except Exception:  # a full disk or closed pipe: exit 120, as the interpreter does
        code = code or 120
    try:
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)
