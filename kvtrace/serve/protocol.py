"""The wire format between the launcher and ``kvtrace serve`` (standard library only).

One Unix stream connection per command. Every message is a frame: one kind byte, a 4-byte
big-endian length, then the payload.

Client -> server: ``R`` a request (JSON: argv, cwd, env, terminal facts; see
``kvtrace.serve.client.request``), ``P`` a ping, ``S`` stop the server.
Server -> client: ``A`` accepted (sent at once, before the command waits for its turn), ``N``
refused (the client runs the command itself; payload: why), ``O``/``E`` bytes for stdout/stderr,
``X`` the exit code (ASCII digits), ``I`` status (JSON, the answer to a ping).
"""

from __future__ import annotations

import socket
import struct

HEADER = struct.Struct(">cI")
VERSION = 1

REQUEST, PING, STOP = b"R", b"P", b"S"
ACCEPTED, REFUSED, STDOUT, STDERR, EXIT, INFO = b"A", b"N", b"O", b"E", b"X", b"I"


def send(sock: socket.socket, kind: bytes, payload: bytes = b"") -> None:
    sock.sendall(HEADER.pack(kind, len(payload)) + payload)


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """The next frame as (kind, payload); None when the peer closed the connection."""
    head = _read_exact(sock, HEADER.size)
    if head is None:
        return None
    kind, n = HEADER.unpack(head)
    payload = _read_exact(sock, n) if n else b""
    if payload is None:
        return None
    return kind, payload
