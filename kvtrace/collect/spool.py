"""The durable spool: accepted batches are appended to a segment and fsynced before the answer.

One writer thread does group commit: every batch queued while the previous ``fsync`` ran is
written with one ``write`` and one ``fdatasync``, and only then are their futures resolved (the
HTTP or gRPC handler answers success when its future resolves). The queue is bounded in bytes;
the spool on disk (segments not yet ingested) is bounded too. Over either bound ``submit`` raises
:class:`SpoolFull`, which the front ends turn into 429/503 with ``Retry-After``.

Segment states and file names are described in :mod:`kvtrace.collect.segments`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvtrace.collect import segments as seg
from kvtrace.errors import ConfigError

log = logging.getLogger("kvtrace.collect")


class SpoolFull(Exception):
    """The spool cannot take this batch now; the client should retry after ``retry_after`` seconds."""

    def __init__(self, message: str, *, status: int, retry_after: int):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class SpoolWriteError(Exception):
    """Writing or fsyncing the segment failed (disk full, I/O error): nothing was acknowledged."""


@dataclass
class Recovery:
    """What opening the spool found from a previous run."""

    segments_recovered: int = 0  # .open segments sealed after a crash
    frames_kept: int = 0
    bytes_cut: int = 0  # torn (never acknowledged) tails removed


@contextmanager
def ops_lock(spool: Path, timeout: float = 120.0):
    """Serialise segment conversions, ingests and recovery (also against a previous run's worker)."""
    fh = open(spool / ".ops.lock", "a+b")
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{spool}: segment operations are locked by another process") from None
                time.sleep(0.05)
        yield
    finally:
        fh.close()


class Spool:
    """A folder of segments with one writer.

    Args:
        path: the spool folder (created if missing).
        segment_bytes: seal the open segment once it reaches this size.
        segment_age: seal the open segment this many seconds after its first write.
        max_queue_bytes: bytes waiting for the writer above which ``submit`` answers 429.
        max_spool_bytes: bytes of segments not yet ingested above which ``submit`` answers 503.
        on_seal: called (from the writer thread) with the path of each newly sealed segment.
    """

    def __init__(
        self,
        path: Path,
        *,
        segment_bytes: int = 64 << 20,
        segment_age: float = 60.0,
        max_queue_bytes: int = 64 << 20,
        max_spool_bytes: int = 10 << 30,
        on_seal=None,
    ):
        self.path = Path(path)
        self.segment_bytes, self.segment_age = segment_bytes, segment_age
        self.max_queue_bytes, self.max_spool_bytes = max_queue_bytes, max_spool_bytes
        self.on_seal = on_seal
        self._cond = threading.Condition()
        self._io = threading.Lock()
        self._queue: list[tuple[bytes, Future, int]] = []
        self._queued_bytes = 0
        self._accepting = False
        self._stop = False
        self._fd: int | None = None
        self._seg_path: Path | None = None
        self._seg_size = 0
        self._seg_opened = 0.0
        self._seq = 0
        self._backlog_base = 0  # bytes of sealed + ready segments at the last refresh
        self._lock_fh = None
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------------
    def open(self) -> Recovery:
        """Lock the folder, recover what a crash left, and start the writer."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.path / seg.INGESTED_DIR).mkdir(mode=0o700, exist_ok=True)
        self._lock_fh = open(self.path / ".lock", "a+b")
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise ConfigError(
                f"spool {self.path} is in use by another kvtrace collect",
                hint="stop the other collector or pass a different --spool",
            ) from None
        rec = Recovery()
        with ops_lock(self.path):
            seg.tidy(self.path)
            for p in seg.listing(self.path, seg.OPEN):
                _sealed, frames, cut = seg.recover_open(p)
                rec.segments_recovered += 1
                rec.frames_kept += frames
                rec.bytes_cut += cut
        self.refresh_backlog()
        self._accepting, self._stop = True, False
        self._thread = threading.Thread(target=self._run, name="kvtrace-spool-writer", daemon=True)
        self._thread.start()
        return rec

    def stop_accepting(self) -> None:
        with self._cond:
            self._accepting = False

    def close(self) -> None:
        """Refuse new batches, write and acknowledge the queued ones, seal the open segment."""
        with self._cond:
            self._accepting = False
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.rotate()
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None

    # -- state -----------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """The writer thread is running (health check)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def queue_bytes(self) -> int:
        return self._queued_bytes

    @property
    def backlog_bytes(self) -> int:
        """Bytes of segments on disk that are not yet ingested (open, sealed and ready)."""
        return self._backlog_base + self._seg_size

    def refresh_backlog(self) -> None:
        """Recount sealed and ready segments on disk (after conversions and ingests)."""
        with self._io:  # a segment being sealed meanwhile would be counted twice or not at all
            total = 0
            for suffix in (seg.SEALED, seg.READY):
                for p in seg.listing(self.path, suffix):
                    try:
                        total += p.stat().st_size
                    except FileNotFoundError:
                        pass
            self._backlog_base = total

    # -- submit ----------------------------------------------------------------------------------
    def submit(self, kind: int, payload: bytes, records: int) -> Future:
        """Queue one batch; the future resolves (to ``records``) once it is on disk.

        Raises:
            SpoolFull: the queue or the spool is over its bound, or the collector is stopping.
        """
        frame = seg.encode_frame(kind, payload)
        with self._cond:
            if not self._accepting:
                raise SpoolFull("the collector is shutting down", status=503, retry_after=5)
            if self._queue and self._queued_bytes + len(frame) > self.max_queue_bytes:
                raise SpoolFull("the spool queue is full", status=429, retry_after=1)
            if self.backlog_bytes + self._queued_bytes > self.max_spool_bytes:
                raise SpoolFull(
                    f"the spool holds over {self.max_spool_bytes} bytes not yet ingested", status=503, retry_after=30
                )
            fut: Future = Future()
            self._queue.append((frame, fut, records))
            self._queued_bytes += len(frame)
            self._cond.notify()
        return fut

    # -- writer ----------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    wait = self._age_left()
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait if wait is not None else 1.0)
                batch, self._queue = self._queue, []
                self._queued_bytes = 0
                stop = self._stop
            if batch:
                self._write(batch)
            age_left = self._age_left()
            if age_left is not None and (self._seg_size >= self.segment_bytes or age_left <= 0):
                self.rotate()
            if stop:
                with self._cond:
                    if not self._queue:
                        return

    def _age_left(self) -> float | None:
        if self._fd is None:
            return None
        return self.segment_age - (time.monotonic() - self._seg_opened)

    def _open_segment(self) -> None:
        self._seq += 1
        sid = seg.new_segment_id(seq=self._seq)
        path = self.path / (sid + seg.OPEN)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        seg.fsync_dir(self.path)  # the new name must survive a crash as well as its data
        self._seg_path, self._seg_size, self._seg_opened = path, 0, time.monotonic()

    def _write(self, batch: list[tuple[bytes, Future, int]]) -> None:
        data = b"".join(frame for frame, _, _ in batch)
        error: Exception | None = None
        with self._io:
            try:
                if self._fd is None:
                    self._open_segment()
                view = memoryview(data)
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
                os.fdatasync(self._fd)
                self._seg_size += len(data)
            except OSError as e:
                error = SpoolWriteError(f"cannot write spool segment: {e.strerror or e}")
                log.error("spool write failed: %s", e)
                self._discard_partial()
        for _frame, fut, records in batch:
            if error is None:
                fut.set_result(records)
            else:
                fut.set_exception(error)

    def _discard_partial(self) -> None:
        """After a failed write, cut the segment back to its acknowledged size (or seal it)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self._seg_size)
            os.fdatasync(self._fd)
        except OSError:
            try:
                self._seal_locked()
            except OSError as e:  # left as .open: the next start recovers it
                log.error("cannot seal spool segment after a write error: %s", e)

    def rotate(self) -> Path | None:
        """Seal the open segment (if it has data); returns the sealed path."""
        with self._io:
            sealed = self._seal_locked()
        if sealed is not None and self.on_seal is not None:
            self.on_seal(sealed)
        return sealed

    def _seal_locked(self) -> Path | None:
        if self._fd is None:
            return None
        fd, path, size = self._fd, self._seg_path, self._seg_size
        self._fd, self._seg_path = None, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        sealed = path.with_name(seg.segment_id(path) + seg.SEALED)
        os.replace(path, sealed)
        seg.fsync_dir(self.path)
        self._backlog_base += size
        self._seg_size = 0
        return sealed
