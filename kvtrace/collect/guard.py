"""The collector's defences at the connection level: deadlines, a connection cap, quiet logs.

uvicorn times out a connection only while it idles between requests; one that never finishes its
request headers would stay open for good, and enough of them use up the open files, so that
every exporter's POST then times out before any token is checked. :func:`guarded_protocol`
makes uvicorn's h11 protocol close a connection whose request headers are not complete within
``header_timeout`` (from the connection, or from the previous answer on a kept-alive one), and
answer a connection beyond ``max_connections`` at once with ``503`` + ``Retry-After`` and close
it. The body has its own deadline in the handler (:mod:`kvtrace.collect.http_app`).

:func:`connection_budget` keeps the cap under the process's open-file limit, raising the soft
limit to the hard one first. :class:`RateLimit` lets the same log line through once per interval
(with a count of what it held back), so a storm of one error cannot fill the disk.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from urllib.parse import parse_qsl, urlencode

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("kvtrace.collect")

# Open files the collector needs besides client connections: spool, worker pipes, gRPC, logs.
RESERVED_FILES = 128
# Connections the event loop accepts in one go before any is refused: the listen backlog.
ACCEPT_BURST = 128


def connection_budget(wanted: int) -> int:
    """How many client connections the open-file limit allows, at most ``wanted``. Raises the soft
    limit to the hard one first (systemd's 1,024 soft limit is the usual trap)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    budget = max(1, min(wanted, soft - RESERVED_FILES - ACCEPT_BURST))
    if budget < wanted:
        log.warning(
            "the open-file limit (%d) allows %d client connections, not %d; raise it "
            "(LimitNOFILE= in the systemd unit, ulimit -n)",
            soft,
            budget,
            wanted,
        )
    return budget


_REFUSAL_BODY = b'{"code":14,"message":"too many connections to kvtrace collect; retry later"}'
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n" + _REFUSAL_BODY
)
_TIMEOUT_BODY = b'{"code":4,"message":"request headers not received in time"}'
TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _TIMEOUT_BODY
)


def guarded_protocol(header_timeout: float, max_connections: int) -> type:
    """uvicorn's h11 protocol with a deadline for request headers and a connection cap."""

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._kv_deadline = None
            self._kv_cycle = None
            if len(self.connections) > max_connections:
                log.warning(
                    "refused a connection: %d open, the limit is %d", len(self.connections) - 1, max_connections
                )
                transport.write(REFUSAL)
                transport.close()
                return
            self._kv_arm()

        def _kv_arm(self) -> None:
            self._kv_disarm()
            self._kv_deadline = self.loop.call_later(header_timeout, self._kv_expire)

        def _kv_disarm(self) -> None:
            if self._kv_deadline is not None:
                self._kv_deadline.cancel()
                self._kv_deadline = None

        def _kv_expire(self) -> None:
            self._kv_deadline = None
            if not self.transport.is_closing():
                log.info("closed a connection that sent no complete request headers in %.0f s", header_timeout)
                self.transport.write(TIMED_OUT)
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not self._kv_cycle:  # a request's headers are complete
                self._kv_cycle = self.cycle
                self._kv_disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._kv_arm()  # the next request's headers, on a kept-alive connection

        def connection_lost(self, exc) -> None:
            self._kv_disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol


class RateLimit(logging.Filter):
    """Let a log line of the same logger, text and error type through once per ``interval``
    seconds; the next one that passes says how many were held back."""

    def __init__(self, interval: float = 10.0):
        super().__init__()
        self.interval = interval
        self._lock = threading.Lock()
        self._seen: dict[tuple, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        key = (record.name, str(record.msg), exc)
        now = time.monotonic()
        with self._lock:
            last, held = self._seen.get(key, (float("-inf"), 0))
            if now - last < self.interval:
                self._seen[key] = (last, held + 1)
                return False
            self._seen[key] = (now, 0)
            if len(self._seen) > 1000:  # forget old lines, keep the table small
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.interval}
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {self.interval:.0f} s)"
        return True


class RedactQuery(logging.Filter):
    """Access log lines keep a query string's keys but never its values (a token may be one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            path, _, query = args[2].partition("?")
            redacted = urlencode([(k, "REDACTED") for k, _v in parse_qsl(query, keep_blank_values=True)])
            record.args = args[:2] + (f"{path}?{redacted}",) + args[3:]
        return True
