"""The wire format between the launcher and ``kvtrace serve`` (standard library only).

One Unix stream connection per command. Every message is a frame: one kind byte, a 4-byte
big-endian length, then the payload. Only builtins are used (no ``socket``, ``struct`` or
``json`` import): the client side runs in every forwarded command's start-up.

Client -> server: ``R`` a request (a ``marshal``-ed dict of str/int/bool/list: argv, cwd,
environment, umask, stream encodings; marshal is a builtin, where ``json`` would cost the client
5 ms of imports, and the server only reads it from peers of its own uid; see
``kvtrace.wire.client.request``), sent with the client's stdin, stdout and stderr attached
(``SCM_RIGHTS``): the command's process writes to them itself. Then ``C`` for each Ctrl-C the
client receives (the command's process gets a SIGINT). Also ``P`` a ping and ``S`` stop the server.
Server -> client: ``A`` accepted (sent at once, before the command waits for its turn), ``N``
refused (the client runs the command itself; payload: why), ``X`` the exit code (ASCII digits),
``I`` status (JSON, the answer to a ping).
"""

from __future__ import annotations

import os

VERSION = 2

# Commands that read or write the warehouse and may run inside the server.
FORWARDED = frozenset({"ingest", "report", "query", "export", "lake", "replay", "reuse", "size", "run"})
# Never forwarded: serve itself, the long-running collect and schedule, synth (no warehouse),
# help and version, and a reuse report of a lake on Spark (its driver and JVM belong to the
# command's own process, not to a fork of the server).
LOCAL_ARGS = frozenset({"--help", "-h", "--version", "--lake", "--engine"})
HEADER_SIZE = 5

REQUEST, PING, STOP, CANCEL = b"R", b"P", b"S", b"C"
ACCEPTED, REFUSED, EXIT, INFO = b"A", b"N", b"X", b"I"


def runs_here(argv: list[str]) -> bool:
    """Whether ``argv`` holds an argument that keeps a command out of the server (``--lake=DIR``
    counts as ``--lake``)."""
    return any(a.split("=", 1)[0] in LOCAL_ARGS for a in argv)


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def send(sock, kind: bytes, payload: bytes = b"") -> None:
    """Send one frame on a connected socket (``socket.socket`` or ``_socket.socket``)."""
    sock.sendall(frame(kind, payload))


def _read_exact(sock, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv(sock) -> tuple[bytes, bytes] | None:
    """The next frame as (kind, payload); None when the peer closed the connection."""
    head = _read_exact(sock, HEADER_SIZE)
    if head is None:
        return None
    return _rest(sock, head)


def _rest(sock, head: bytes) -> tuple[bytes, bytes] | None:
    kind, n = head[:1], int.from_bytes(head[1:], "big")
    payload = _read_exact(sock, n) if n else b""
    if payload is None:
        return None
    return kind, payload


def recv_with_fds(sock, max_fds: int = 3) -> tuple[tuple[bytes, bytes] | None, list[int]]:
    """The next frame and the file descriptors sent with it (``SCM_RIGHTS``; ``socket.socket``
    only). The caller owns the descriptors, whatever the frame."""
    import array
    import socket

    fds = array.array("i")
    head, anc, _flags, _addr = sock.recvmsg(
        HEADER_SIZE, socket.CMSG_SPACE(max_fds * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    try:
        if not head:
            return None, list(fds)
        if len(head) < HEADER_SIZE:
            more = _read_exact(sock, HEADER_SIZE - len(head))
            if more is None:
                return None, list(fds)
            head += more
        return _rest(sock, head), list(fds)
    except BaseException:
        for fd in fds:  # a request that did not arrive whole: its descriptors go
            os.close(fd)
        raise
