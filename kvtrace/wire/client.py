"""The client side of ``kvtrace serve``: forward one command and relay its output (standard library only).

The launcher calls :func:`forward` only when the warehouse's socket file exists. Whatever goes
wrong before the server has accepted the command (no server behind a stale socket, a server
that does not answer within ``HELLO_TIMEOUT_S``, a refusal) returns None, and the launcher runs
the command itself, so a dead server never makes a command hang or fail.

Nothing is sent before the socket is known to be ours: the socket file and its folder pass
:func:`kvtrace.wire.paths.socket_problem`, and the process behind it runs as our uid
(``SO_PEERCRED``). A socket that fails either check is refused with one line on stderr naming it
and why, and the command runs here: it never reaches the other user's process, and a local run
opens the warehouse under the usual lock, so the warehouse itself is as safe as without a server.
"""

from __future__ import annotations

import _socket
import marshal
import os
import sys

from kvtrace.wire import paths, protocol

# True inside the server: a command it runs must never forward to itself.
SERVING = False

# A live server answers at once, even while it runs another command (the command then waits
# for its turn); a stopped or frozen one is given up on after this.
HELLO_TIMEOUT_S = 3.0

# The environment a command sees: what changes kvtrace's behaviour or its output's bytes.
ENV_PREFIXES = ("KVTRACE_", "POLARS_", "XDG_", "LC_")
ENV_NAMES = frozenset({
    "COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "PY_COLORS", "CLICOLOR",
    "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERMINAL_WIDTH", "GITHUB_ACTIONS",
    "TZ", "HOME", "USER", "LANG", "TMPDIR", "TEMP", "TMP",
})


def is_relevant(key: str) -> bool:
    """Whether an environment variable travels with a forwarded command."""
    return key in ENV_NAMES or key.startswith(ENV_PREFIXES)


def relevant_env(environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if is_relevant(k)}


def _isatty(stream) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, OSError):
        return False


def _size(fd: int) -> list[int] | None:
    try:
        return list(os.get_terminal_size(fd))
    except (OSError, ValueError):
        return None


def _encoding(stream) -> list[str]:
    return [getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict"]


def request(argv: list[str], db_real: str, prog: str) -> dict:
    """What the server needs to run ``argv`` as this process would: cwd, env, terminal, umask."""
    mask = os.umask(0)
    os.umask(mask)
    return {
        "v": protocol.VERSION, "argv": list(argv), "prog": prog, "db": db_real, "cwd": os.getcwd(),
        "env": relevant_env(os.environ), "umask": mask, "pid": os.getpid(),
        "tty": [_isatty(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
        "size": [_size(fd) for fd in (0, 1, 2)],
        "encoding": [_encoding(sys.stdout), _encoding(sys.stderr)],
    }


def connect(sock_path: str, timeout: float = HELLO_TIMEOUT_S):
    """A connection to the server behind ``sock_path``, or None when there is none we can trust
    (an untrusted socket is named on stderr; a stale one, with nobody listening, silently)."""
    problem = paths.socket_problem(sock_path)
    if problem is not None:
        refuse(sock_path, problem)
        return None
    # _socket, not socket: the socket module's enums cost the client ~3 ms of imports.
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
    except OSError:
        s.close()
        return None
    uid = peer_uid(s)
    if uid != os.geteuid():
        s.close()
        refuse(sock_path, f"the process behind it runs as uid {uid}, not as you (uid {os.geteuid()})"
               if uid is not None else "the uid of the process behind it cannot be checked on this system")
        return None
    return s


def peer_uid(s) -> int | None:
    """The effective uid of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``:
    struct ucred {pid, uid, gid}); None where the system cannot tell."""
    opt = getattr(_socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        cred = s.getsockopt(_socket.SOL_SOCKET, opt, 12)
    except OSError:
        return None
    return int.from_bytes(cred[4:8], sys.byteorder)


def refuse(sock_path: str, problem: str) -> None:
    """Say once, on stderr, that a socket was not used and why."""
    try:
        sys.stderr.write(f"kvtrace: not using the server socket {sock_path}: {problem}; nothing was sent to it "
                         f"(if no `kvtrace serve` of yours listens there, remove it: rm {sock_path})\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def forward(sock_path: str, argv: list[str], db_real: str, prog: str, out=None, err=None) -> int | None:
    """Run ``argv`` in the server behind ``sock_path``; returns its exit code, or None when the
    server did not take the command (the caller then runs it itself). Output goes to our
    stdout/stderr, or to the binary streams ``out``/``err``."""
    s = connect(sock_path)
    if s is None:
        return None
    req = request(argv, db_real, prog)
    if out is not None:
        req["tty"] = [False, False, False]
    frame = _ask(s, protocol.REQUEST, marshal.dumps(req, 4))
    if frame is None or frame[0] != protocol.ACCEPTED:
        s.close()
        return None
    s.settimeout(None)
    return _relay(s, out or sys.stdout.buffer, err or sys.stderr.buffer)


def run_captured(db: str, argv: list[str]) -> tuple[int, bytes, bytes] | None:
    """Run a kvtrace command in the server of warehouse ``db`` if one answers, capturing its
    output: ``(exit code, stdout, stderr)``; None when no server took it (or we are the server)."""
    import io

    from kvtrace.wire.paths import served

    target = None if SERVING else served(db)
    if target is None:
        return None
    out, err = io.BytesIO(), io.BytesIO()
    code = forward(target[0], argv, target[1], "kvtrace", out, err)
    return None if code is None else (code, out.getvalue(), err.getvalue())


def _relay(s, out, err) -> int | None:
    printed = False
    try:
        while True:
            frame = protocol.recv(s)
            if frame is None:
                err.write(b"kvtrace: the server (kvtrace serve) stopped before the command finished\n")
                return 1
            kind, data = frame
            if kind == protocol.STDOUT:
                out.write(data)
                out.flush()
            elif kind == protocol.STDERR:
                err.write(data)
                err.flush()
            elif kind == protocol.EXIT:
                return int(data)
            elif kind == protocol.REFUSED and not printed:
                return None          # the server stopped before the command's turn: run it here
            printed = printed or kind in (protocol.STDOUT, protocol.STDERR)
    except KeyboardInterrupt:
        # Closing the connection makes the server interrupt the command and roll back its open
        # transaction; what it had committed (an ingest's finished files) stays. One line, exit
        # 130, as a command run here ends on Ctrl-C.
        err.write(b"\nInterrupted: kvtrace serve stopped the command; what it had committed is kept and the "
                  b"rest rolled back; run the same command again to finish it\n")
        return 130
    except BrokenPipeError:
        # Our stdout was closed (`| head`): end quietly, as the server stops writing too.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 1
    finally:
        s.close()


def call(sock_path: str, kind: bytes, timeout: float = HELLO_TIMEOUT_S) -> tuple[bytes, bytes] | None:
    """Send a control frame (ping, stop) and return the answer; None if no server answered."""
    s = connect(sock_path, timeout)
    if s is None:
        return None
    try:
        return _ask(s, kind)
    finally:
        s.close()


def _ask(s, kind: bytes, payload: bytes = b"") -> tuple[bytes, bytes] | None:
    """Send a frame and read the answer. A server that refuses us answers before reading and
    closes: our send may then fail (EPIPE) while its answer is still there to read."""
    try:
        protocol.send(s, kind, payload)
    except OSError:
        pass
    try:
        return protocol.recv(s)
    except OSError:
        return None
