"""``Collector``: the OTLP/HTTP and gRPC receivers, the spool and the ingest loop, started together.

Threads of the collector process: uvicorn's event loop (HTTP), gRPC's handler pool, the spool
writer (group commit), and the maintenance thread, which hands sealed segments to the worker
process for conversion and, every ``ingest_every`` seconds, seals the open segment and has the
worker ingest the ready ones. ``run()`` serves until SIGTERM or SIGINT, then stops accepting,
lets in-flight requests finish, flushes the spool, converts and (if a warehouse is set) ingests
what is left, and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time

from kvtrace.collect import segments as seg
from kvtrace.collect.config import CollectorConfig
from kvtrace.collect.guard import ACCEPT_BURST, RateLimit, RedactQuery, connection_budget, guarded_protocol
from kvtrace.collect.metrics import Metrics
from kvtrace.collect.spool import Recovery, Spool
from kvtrace.collect.worker import Worker
from kvtrace.errors import ConfigError

log = logging.getLogger("kvtrace.collect")
GRACE_SECONDS = 10.0


class Collector:
    """One collector instance. ``start()``/``stop()`` for embedding (tests), ``run()`` for the CLI.

    Args:
        config: the settings (see :class:`kvtrace.collect.config.CollectorConfig`).
    """

    def __init__(self, config: CollectorConfig):
        self.config = config
        self.metrics = Metrics()
        self.spool = Spool(
            config.spool,
            segment_bytes=config.segment_bytes,
            segment_age=config.segment_age,
            max_queue_bytes=config.max_queue,
            max_spool_bytes=config.max_spool,
            on_seal=self._on_seal,
        )
        self.worker = Worker()
        self.recovery: Recovery | None = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._wake = threading.Event()
        self._sealed_pending = threading.Event()
        self._stop = threading.Event()
        self._maint: threading.Thread | None = None
        self._uv = None
        self._uv_thread: threading.Thread | None = None
        self._grpc = None
        self._started = False
        # The same error at every connection (out of open files, a storm of bad clients) is logged
        # once per interval; access log lines never show a query string's values.
        self._log_filters = [
            (logging.getLogger(name), RateLimit()) for name in ("kvtrace.collect", "asyncio", "uvicorn.error")
        ]
        self._log_filters.append((logging.getLogger("uvicorn.access"), RedactQuery()))

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "Collector":
        """Recover the spool, then listen. Returns once both listeners accept connections.

        Raises:
            ConfigError: unsafe bind, spool in use, or an address that cannot be bound.
        """
        self.config.check()
        for logger, f in self._log_filters:
            logger.addFilter(f)
        http_sock = self._bind_http()
        try:
            self.recovery = self.spool.open()
        except BaseException:
            http_sock.close()
            raise
        if self.recovery.segments_recovered:
            log.warning(
                "recovered %d open segment(s) from an unclean stop (%d frames kept, %d torn bytes cut)",
                self.recovery.segments_recovered,
                self.recovery.frames_kept,
                self.recovery.bytes_cut,
            )
            self.metrics.inc("kvtrace_collect_recovered_segments_total", self.recovery.segments_recovered)
        self._maint = threading.Thread(target=self._maintain, name="kvtrace-maintenance", daemon=True)
        self._maint.start()
        try:
            if self.config.grpc_port is not None:
                from kvtrace.collect.grpc_server import start_grpc

                try:
                    self._grpc, self.grpc_port = start_grpc(self, self.config.host, self.config.grpc_port)
                except OSError as e:
                    raise ConfigError(
                        str(e), hint="choose another --grpc-port (-1: no gRPC) or stop what uses it"
                    ) from None
            self._start_http(http_sock)
        except BaseException:
            if self._uv is None:
                http_sock.close()
            self.stop()
            raise
        self._started = True
        return self

    def _bind_http(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only then, and
        # without it Nagle + delayed ACK add ~40 ms to every answer.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host.strip("[]"), self.config.http_port))
        except OSError as e:
            sock.close()
            raise ConfigError(
                f"cannot listen on {self.config.host}:{self.config.http_port}: {e.strerror}",
                hint="choose another --http-port or stop what uses it",
            ) from None
        sock.listen(1024)
        self.http_port = sock.getsockname()[1]
        return sock

    def _start_http(self, sock: socket.socket) -> None:
        import uvicorn

        from kvtrace.collect.http_app import make_app

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # signals belong to Collector.run, not to this thread
                yield

        protocol = guarded_protocol(self.config.header_timeout, connection_budget(self.config.max_connections))
        config = uvicorn.Config(
            make_app(self),
            log_config=None,
            access_log=self.config.access_log,
            lifespan="off",
            timeout_graceful_shutdown=int(GRACE_SECONDS),
            server_header=False,
            date_header=False,
            http=protocol,
            backlog=ACCEPT_BURST,
        )
        self._uv = _Server(config)
        self._uv_thread = threading.Thread(
            target=lambda: asyncio.run(self._uv.serve(sockets=[sock])), name="kvtrace-http", daemon=True
        )
        self._uv_thread.start()
        deadline = time.monotonic() + 15
        while not self._uv.started:
            if not self._uv_thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the HTTP server did not start on {self.config.host}:{self.http_port}")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop accepting, finish in-flight requests, flush the spool, convert and ingest the rest."""
        if self._uv is not None:
            self._uv.should_exit = True
        grpc_done = self._grpc.stop(GRACE_SECONDS) if self._grpc is not None else None
        if self._uv_thread is not None:
            self._uv_thread.join(GRACE_SECONDS + 5)
        if grpc_done is not None:
            grpc_done.wait(GRACE_SECONDS + 5)
        self._uv = self._uv_thread = self._grpc = None
        self.spool.close()
        self._stop.set()
        self._wake.set()
        if self._maint is not None:
            self._maint.join()
            self._maint = None
        self.worker.close()
        self._started = False
        for logger, f in self._log_filters:
            logger.removeFilter(f)

    def run(self, on_ready=None) -> None:
        """Serve until SIGTERM or SIGINT (a second signal exits at once), then stop cleanly.

        Args:
            on_ready: called once both listeners accept connections (the CLI prints the ports).
        """
        stop = threading.Event()

        def on_signal(signum, frame):
            if stop.is_set():
                log.warning("second signal: exiting without waiting")
                raise SystemExit(1)
            log.info("received %s: stopping", signal.Signals(signum).name)
            stop.set()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            if on_ready is not None:
                on_ready()
            while not stop.wait(1.0):
                pass
        finally:
            self.stop()
            for s, h in old.items():
                signal.signal(s, h)

    # -- health ----------------------------------------------------------------------------------
    def healthy(self) -> bool:
        return self.spool.alive

    def update_gauges(self) -> None:
        self.metrics.set("kvtrace_collect_spool_bytes", self.spool.backlog_bytes)
        self.metrics.set("kvtrace_collect_spool_queue_bytes", self.spool.queue_bytes)
        self.metrics.set("kvtrace_collect_segments_set_aside", len(seg.set_aside(self.config.spool)))

    # -- maintenance: convert sealed segments, ingest ready ones ---------------------------------
    def _on_seal(self, path) -> None:
        self.metrics.inc("kvtrace_collect_segments_sealed_total")
        self._sealed_pending.set()
        self._wake.set()

    def _maintain(self) -> None:
        every = self.config.ingest_every
        # Leftovers from an earlier run are converted (and ingested) straight away.
        self._cycle(ingest=every > 0, rotate=False)
        next_ingest = time.monotonic() + every if every > 0 else float("inf")
        while not self._stop.is_set():
            self._wake.wait(max(0.0, min(1.0, next_ingest - time.monotonic())))
            self._wake.clear()
            if self._stop.is_set():
                break
            due = time.monotonic() >= next_ingest
            if due or self._sealed_pending.is_set():
                self._cycle(ingest=due, rotate=due)
            if due:
                next_ingest = time.monotonic() + every
        # The spool is closed and sealed by now: every segment is tried once more, backoff or not.
        self._cycle(ingest=every > 0, rotate=False, last=True)

    def _cycle(self, *, ingest: bool, rotate: bool, last: bool = False) -> None:
        spool_dir = str(self.config.spool)
        try:
            if rotate:
                self.spool.rotate()
            self._sealed_pending.clear()
            if seg.listing(self.config.spool, seg.SEALED):
                f = self.worker.call("finish", spool_dir, last)
                self.metrics.set("kvtrace_collect_segments_retrying", f["retrying"])
                log.debug("converted %d segment(s) into %d lines", f["converted"], f["lines"])
            if ingest and self.config.db is not None and seg.listing(self.config.spool, seg.READY):
                t = self.worker.call("ingest", spool_dir, str(self.config.db), self.config.keep_ingested, last)
                self.metrics.inc("kvtrace_collect_segments_ingested_total", t["segments"])
                self.metrics.inc("kvtrace_collect_segment_failures_total", t["failed"])
                self.metrics.set("kvtrace_collect_segments_retrying", t["retrying"])
                self.metrics.inc("kvtrace_collect_ingested_requests_total", t["requests_added"])
                self.metrics.inc("kvtrace_collect_rejected_records_total", t["lines_rejected"])
                log.info(
                    "ingested %d segment(s): %d requests, %d metric points added, %d duplicates skipped, "
                    "%d lines rejected",
                    t["segments"],
                    t["requests_added"],
                    t["metric_points_added"],
                    t["duplicates_skipped"],
                    t["lines_rejected"],
                )
                # A reject's reason can quote a value from the request: details only with -v.
                for r in t["rejects"]:
                    log.debug("ingest skipped %s", r)
            if ingest and self.config.db is not None:
                self.metrics.set("kvtrace_collect_last_ingest_timestamp_seconds", time.time())
        except Exception as e:  # noqa: BLE001 - segments stay on disk; the next cycle retries
            self.metrics.inc("kvtrace_collect_ingest_errors_total")
            log.warning("segment maintenance failed (will retry): %s: %s", type(e).__name__, e)
        finally:
            self.spool.refresh_backlog()
