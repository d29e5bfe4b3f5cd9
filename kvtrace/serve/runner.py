"""Run one forwarded command inside the server as the client's own process would have run it.

For the duration of a command the process takes on the client's view of the world: its working
folder, its kvtrace-relevant environment (see ``kvtrace.wire.client.ENV_NAMES``), umask,
``sys.argv``, and stdout/stderr streams that are terminals or not as the client's are, with the
client's encodings and terminal sizes (``os.get_terminal_size`` answers for the client's fds), so
rich, click and polars print the same bytes. Everything is put back afterwards. Commands run
one at a time (the server holds a lock), which is what makes swapping process-wide state safe.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kvtrace.wire import protocol
from kvtrace.wire.client import is_relevant, relevant_env


class Sink(io.RawIOBase):
    """A write-only raw stream that sends each write to the client as one frame."""

    def __init__(self, send: Callable[[bytes, bytes], bool], kind: bytes, tty: bool):
        super().__init__()
        self._send, self._kind, self._tty = send, kind, tty

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._tty

    def write(self, b) -> int:
        data = bytes(b)
        if data:
            self._send(self._kind, data)   # a gone client is noticed by the server, not here
        return len(data)


class _NoInput(io.TextIOWrapper):
    """stdin of a forwarded command: empty (commands that read stdin are never forwarded)."""

    def __init__(self, tty: bool):
        super().__init__(io.BytesIO(b""), encoding="utf-8")
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def _text_stream(send, kind: bytes, tty: bool, encoding: list[str], stderr: bool) -> io.TextIOWrapper:
    enc, errors = (encoding + ["utf-8", "strict"])[:2] if encoding else ("utf-8", "strict")
    try:
        "".encode(enc)
    except LookupError:
        enc = "utf-8"
    # Python's own streams: stderr is line-buffered, stdout too when it is a terminal.
    return io.TextIOWrapper(io.BufferedWriter(Sink(send, kind, tty), 1 << 16), encoding=enc,
                            errors=errors, line_buffering=tty or stderr)


@contextmanager
def client_view(req: dict, send: Callable[[bytes, bytes], bool]) -> Iterator[tuple]:
    """Take on the client's cwd, env, umask, argv, streams and terminal sizes; yields (stdout, stderr)."""
    tty = (list(req.get("tty") or []) + [False, False, False])[:3]
    sizes = (list(req.get("size") or []) + [None, None, None])[:3]
    encodings = list(req.get("encoding") or [[], []]) + [[], []]
    out = _text_stream(send, protocol.STDOUT, bool(tty[1]), encodings[0], stderr=False)
    err = _text_stream(send, protocol.STDERR, bool(tty[2]), encodings[1], stderr=True)
    env = relevant_env({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    keys = set(env) | {k for k in os.environ if is_relevant(k)}
    saved_env = {k: os.environ.get(k) for k in keys}
    saved = (os.getcwd(), sys.stdin, sys.stdout, sys.stderr, sys.argv, os.get_terminal_size)
    saved_umask = os.umask(int(req.get("umask", 0o022)))
    tz_before = os.environ.get("TZ")
    tmp_before = tuple(os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP"))

    def terminal_size(fd: int = 1) -> os.terminal_size:
        s = sizes[fd] if 0 <= fd < 3 else None
        if not s:
            raise OSError(25, "Inappropriate ioctl for device")
        return os.terminal_size(tuple(s))

    try:
        for k in keys:
            if k in env:
                os.environ[k] = env[k]
            else:
                os.environ.pop(k, None)
        _refresh(tz_before, tmp_before)
        os.chdir(req["cwd"])
        sys.stdin, sys.stdout, sys.stderr = _NoInput(bool(tty[0])), out, err
        sys.argv = [req.get("prog") or "kvtrace", *req["argv"]]
        os.get_terminal_size = terminal_size
        yield out, err
    finally:
        for stream in (out, err):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        cwd, sys.stdin, sys.stdout, sys.stderr, sys.argv, os.get_terminal_size = saved
        os.umask(saved_umask)
        tz_client = os.environ.get("TZ")
        tmp_client = tuple(os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP"))
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _refresh(tz_client, tmp_client)
        os.chdir(cwd)


def _refresh(tz_before: str | None, tmp_before: tuple) -> None:
    """Make a changed TZ or temporary folder take effect (both are cached by the C library / tempfile)."""
    if os.environ.get("TZ") != tz_before and hasattr(time, "tzset"):
        time.tzset()
    if tuple(os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP")) != tmp_before:
        tempfile.tempdir = None


def invoke(command, argv: list[str], prog: str) -> int:
    """Run a click command as ``kvtrace.cli.main`` does; returns the exit code. Never raises
    (a command that fails, even with a bug, must not take the server down)."""
    import typer

    from kvtrace.errors import KvtraceError
    from kvtrace.errors import exit_code

    try:
        command.main(args=list(argv), prog_name=prog, standalone_mode=True)
        return 0
    except SystemExit as e:
        return exit_code(e.code)
    except KvtraceError as e:
        typer.echo(f"Error: {e}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except BaseException:  # noqa: BLE001 - what Python would print before exiting 1
        traceback.print_exc()
        return 1
