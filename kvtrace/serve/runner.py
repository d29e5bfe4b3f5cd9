"""The process of one forwarded command: a fork of the server that becomes the client's command.

The server forks a child per command; the child takes on the client's world once, for good (it
is the command's own process: nothing is put back): the client's stdin, stdout and stderr (their
descriptors, received over the socket), environment, working folder, umask and ``sys.argv``; then
it runs the command line exactly as ``kvtrace`` does (``kvtrace.launch.run_here``) and exits. The server
itself never changes any of these. What a fork inherits ready is what makes it fast: the
imported modules; it opens the warehouse itself, as a local run does.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable


def _text(fd: int, encoding: list[str], write: bool) -> io.TextIOWrapper:
    enc, errors = (list(encoding) + ["utf-8", "strict"])[:2] if encoding else ("utf-8", "strict")
    try:
        "".encode(enc)
    except LookupError:
        enc = "utf-8"
    tty = os.isatty(fd)
    # As Python sets up its own streams: stdout line-buffered on a terminal, stderr always.
    return io.TextIOWrapper(
        open(fd, "wb" if write else "rb", closefd=False),
        encoding=enc,
        errors=errors,
        line_buffering=write and (tty or fd == 2),
    )


def become(req: dict, fds: list[int], server_pid: int) -> None:
    """Turn this freshly forked process into the client's command process (see the module)."""
    os.setsid()  # signals to the server's process group (a terminal's Ctrl-C, a
    #                             service manager's stop) are not the command's
    _die_with(server_pid)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    # Every other descriptor is the server's (its sockets, other clients' streams): none may
    # stay open here, or a reader of another client's output would wait for this command.
    os.closerange(3, _max_fd())
    encodings = list(req.get("encoding") or []) + [[], []]
    sys.stdin = _text(0, ["utf-8", "strict"], write=False)
    sys.stdout = _text(1, encodings[0], write=True)
    sys.stderr = _text(2, encodings[1], write=True)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    if hasattr(time, "tzset"):
        time.tzset()
    tempfile.tempdir = None
    os.umask(int(req.get("umask", 0o022)))
    os.chdir(req["cwd"])
    sys.argv = [req.get("prog") or "kvtrace", *req["argv"]]
    # What the client's process had: Python's own handler, or ignored (a background job's)
    signal.signal(signal.SIGINT, signal.SIG_IGN if req.get("sigint_ignored") else signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_child(req: dict, fds: list[int], close: list, main: Callable[[str], None], server_pid: int) -> None:
    """In the forked child (SIGINT blocked): close the server's sockets (``close``), become the
    client's command and run ``main`` (``kvtrace.launch.run_here``); never returns (``os._exit``
    with the command's code)."""
    code = 1
    try:
        for s in close:
            s.close()
        become(req, fds, server_pid)
    except BaseException as e:  # noqa: BLE001 - e.g. the client's cwd is gone: one line on its stderr
        _say(f"kvtrace serve: {type(e).__name__}: {e}")
        _leave(1)
    try:
        # A Ctrl-C that came during the fork is delivered here, before the command has done anything.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        main(req.get("prog") or "kvtrace")  # leaves through os._exit itself
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
            _say(str(e.code))
    except KeyboardInterrupt:
        _say("Interrupted: stopped while starting; nothing was written")
        code = 130
    except BaseException:  # noqa: BLE001 - a bug: the traceback Python would print, exit 1
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    _leave(code)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 1 << 16


def _die_with(server_pid: int) -> None:
    """Be interrupted (SIGINT) if the server dies first: the client has given up by then (Linux;
    elsewhere a command outlives a killed server)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGINT), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != server_pid:  # it died before the prctl
        os.kill(os.getpid(), signal.SIGINT)


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass


def _leave(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed pipe or full disk: the code says enough
            pass
    os._exit(code & 0xFF)
