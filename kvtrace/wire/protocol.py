"""The wire format between the launcher and ``kvtrace serve`` (standard library only).

One Unix stream connection per command. Every message is a frame: one kind byte, a 4-byte
big-endian length, then the payload. Only builtins are used (no ``socket``, ``struct`` or
``json`` import): the client side runs in every forwarded command's start-up.

Client -> server: ``R`` a request (a ``marshal``-ed dict of str/int/bool/list: argv, cwd, env,
terminal facts; marshal is a builtin, where ``json`` would cost the client 5 ms of imports, and
the server only reads it from peers of its own uid; see
``kvtrace.wire.client.request``), ``P`` a ping, ``S`` stop the server.
Server -> client: ``A`` accepted (sent at once, before the command waits for its turn), ``N``
refused (the client runs the command itself; payload: why), ``O``/``E`` bytes for stdout/stderr,
``X`` the exit code (ASCII digits), ``I`` status (JSON, the answer to a ping).
"""

from __future__ import annotations

VERSION = 1

# Commands that read or write the warehouse and may run inside the server.
FORWARDED = frozenset({"ingest", "report", "query", "export", "lake", "replay", "reuse", "size", "run"})
# Never forwarded: serve itself, the long-running collect and schedule, synth (no warehouse),
# help and version, anything reading stdin ("-").
LOCAL_ARGS = frozenset({"--help", "-h", "--version", "-"})
HEADER_SIZE = 5

REQUEST, PING, STOP = b"R", b"P", b"S"
ACCEPTED, REFUSED, STDOUT, STDERR, EXIT, INFO = b"A", b"N", b"O", b"E", b"X", b"I"


def send(sock, kind: bytes, payload: bytes = b"") -> None:
    """Send one frame on a connected socket (``socket.socket`` or ``_socket.socket``)."""
    sock.sendall(kind + len(payload).to_bytes(4, "big") + payload)


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
    kind, n = head[:1], int.from_bytes(head[1:], "big")
    payload = _read_exact(sock, n) if n else b""
    if payload is None:
        return None
    return kind, payload
