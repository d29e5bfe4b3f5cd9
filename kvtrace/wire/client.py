"""The client side of ``kvtrace serve``: forward one command and wait for its exit code (standard library only).

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

# A live server answers at once, even while it runs another command (the command then waits
# for its turn); a stopped or frozen one is given up on after this.
HELLO_TIMEOUT_S = 3.0


def _encoding(stream) -> list[str]:
    return [getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict"]


def request(argv: list[str], db_real: str, prog: str) -> dict:
    """What the server needs to run ``argv`` as this process would: cwd, environment, umask and
    the text encodings of our stdout and stderr (the streams themselves travel as descriptors)."""
    mask = os.umask(0)
    os.umask(mask)
    return {
        "v": protocol.VERSION,
        "argv": list(argv),
        "prog": prog,
        "db": db_real,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": mask,
        "pid": os.getpid(),
        "encoding": [_encoding(sys.stdout), _encoding(sys.stderr)],
        "sigint_ignored": _sigint_ignored(),
    }


def _sigint_ignored() -> bool:
    import signal

    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


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
        refuse(
            sock_path,
            f"the process behind it runs as uid {uid}, not as you (uid {os.geteuid()})"
            if uid is not None
            else "the uid of the process behind it cannot be checked on this system",
        )
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
        sys.stderr.write(
            f"kvtrace: not using the server socket {sock_path}: {problem}; nothing was sent to it "
            f"(if no `kvtrace serve` of yours listens there, remove it: rm {sock_path})\n"
        )
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def forward(sock_path: str, argv: list[str], db_real: str, prog: str) -> int | None:
    """Run ``argv`` in the server behind ``sock_path``; returns its exit code, or None when the
    server did not take the command (the caller then runs it itself). The command's process
    writes to our stdin/stdout/stderr descriptors itself; each Ctrl-C here is passed on to it."""
    s = connect(sock_path)
    if s is None:
        return None
    try:
        fds = _std_fds()
        if fds is None:
            return None
        data = protocol.frame(protocol.REQUEST, marshal.dumps(request(argv, db_real, prog), 4))
        try:
            sent = s.sendmsg(
                [data],
                [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))],
            )
            s.sendall(data[sent:])  # a big environment may not go in one piece
            frame = protocol.recv(s)
        except OSError:
            return None
        if frame is not None and frame[0] == protocol.REFUSED and frame[1] == b"another protocol version":
            _say(
                f"kvtrace: the server of {db_real} runs another kvtrace version; this command runs here "
                f"(restart the server: kvtrace serve --stop --db {db_real}, then start it again)"
            )
        if frame is None or frame[0] != protocol.ACCEPTED:
            return None
        s.settimeout(None)
        return _wait(s)
    finally:
        s.close()


def _std_fds() -> list[int] | None:
    """Our descriptors 0, 1 and 2; None if one is closed (the command then runs here)."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return None
    return [0, 1, 2]


def _wait(s) -> int | None:
    """Wait for the command's exit code. Every Ctrl-C meanwhile is sent on as a cancel frame, and
    the command's process takes it as a process of its own would (the first interrupts, one
    ``Interrupted:`` line and exit 130; a third leaves at once)."""
    import signal

    def cancel(signum, frame):
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job ignores it: so does its command
        try:
            signal.signal(signal.SIGINT, cancel)
        except ValueError:  # not the main thread: Ctrl-C stays with whoever handles it
            pass
    while True:
        try:
            frame = protocol.recv(s)
        except KeyboardInterrupt:
            try:
                protocol.send(s, protocol.CANCEL)
            except OSError:
                pass
            continue
        if frame is None:
            _say(
                "kvtrace: the server (kvtrace serve) went away while the command ran; the command is "
                "interrupted (what it had committed is kept)"
            )
            return 1
        if frame[0] == protocol.EXIT:
            return int(frame[1])
        if frame[0] == protocol.REFUSED:
            return None  # the server stopped before the command's turn: it runs here


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


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
