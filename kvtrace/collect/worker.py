"""Segment work done in a separate process: converting sealed segments and ingesting them.

Converting protobuf to OTLP JSON and normalising into DuckDB are CPU work; done in the receiving
process they would hold the GIL and delay acknowledgements. The collector runs them in one
worker process (a fresh interpreter, so no threads are forked). Each operation takes the spool's ops lock,
so even a worker orphaned by a ``kill -9`` of its collector cannot race the next collector; on
Linux the worker also dies with its parent (``PR_SET_PDEATHSIG``).

Exactly once: a ready segment is stored in one transaction (the pipeline records it in the
``ingested_files`` ledger in the same transaction) and only then moved to ``ingested/``. A crash
between the two leaves a segment that the ledger skips (and the keyed merge would add nothing
anyway).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvtrace.collect import segments as seg
from kvtrace.collect.spool import ops_lock
from kvtrace.errors import BadTraceInput, UnknownFormat
from kvtrace.errors import SchemaError

log = logging.getLogger("kvtrace.collect")

STORE_RETRY_SECONDS = 10.0  # how long one ingest waits for a report to let go of the warehouse


def _init_worker(parent: int) -> None:
    # Shutdown is the collector's job: it still needs this worker to convert and ingest the
    # last segment after Ctrl-C (sent to the whole process group) or systemd's SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the collector
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the collector died before prctl took effect
        os._exit(1)
    # Conversion and ingest are background work: on a busy machine the receiver, which clients
    # wait on, goes first (DuckDB's threads inherit the niceness).
    try:
        os.nice(10)
    except OSError:
        pass


# A failed conversion or ingest is retried with backoff until it succeeds: a full disk, a held
# lock or a server that is down all pass, and every record in a segment was acknowledged. Only a
# segment whose own content ingest cannot read (the same bytes give the same error) is set aside
# in SPOOL/failed/, as OTLP JSON lines `kvtrace ingest` reads, after PERMANENT_ATTEMPTS tries.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
PERMANENT_ATTEMPTS = 3
_retry: dict[str, tuple[int, float]] = {}  # segment path -> (failures so far, monotonic time of the next try)


def permanent(error: BaseException) -> bool:
    """Whether a failure is about the segment's own content, so that no retry can change it: ingest
    named a line of the segment."""
    return isinstance(error, (BadTraceInput, UnknownFormat))


def _due(path: Path, now: bool) -> bool:
    """A segment that failed before is tried again once its backoff has passed, or at once when
    ``now`` (the collector's last cycle before a clean stop tries every segment)."""
    entry = _retry.get(str(path))
    return now or entry is None or time.monotonic() >= entry[1]


def record_failure(root: Path, path: Path, error: BaseException, *, may_set_aside: bool = True) -> str:
    """Count a failure: ``"retry"`` (the segment stays where it is and is tried again after a
    backoff) or ``"set_aside"`` (moved to ``failed/`` with its reason beside it)."""
    n = _retry.get(str(path), (0, 0.0))[0] + 1
    text = f"{type(error).__name__}: {error}"
    if may_set_aside and permanent(error) and n >= PERMANENT_ATTEMPTS:
        _retry.pop(str(path), None)
        failed = root / seg.FAILED_DIR
        failed.mkdir(mode=0o700, exist_ok=True)
        seg.write_private(failed / (seg.segment_id(path) + ".error.txt"), text.rstrip() + "\n")
        os.replace(path, failed / (seg.segment_id(path) + seg.READY))
        seg.fsync_dir(failed)
        seg.fsync_dir(root)
        log.error("segment %s set aside in %s: its content cannot be ingested: %s", path.name, failed, text)
        return "set_aside"
    wait = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (n - 1))
    _retry[str(path)] = (n, time.monotonic() + wait)
    log.warning("segment %s failed (attempt %d, next in %.0f s): %s", path.name, n, wait, text)
    return "retry"


def _succeeded(path: Path) -> None:
    _retry.pop(str(path), None)


def _retrying(root: Path) -> int:
    """Segments of this spool still on disk that are waiting for a retry."""
    for name in [n for n in _retry if not os.path.exists(n)]:
        del _retry[name]
    return sum(Path(n).parent == root for n in _retry)


def finish_segments(spool: str, now: bool = False) -> dict:
    """Convert every sealed segment to OTLP JSON lines (with ``now``, those in a backoff too).

    Returns:
        ``{"converted": n, "lines": n, "failed": 0, "retrying": n}`` (segments waiting for a retry).
    """
    root = Path(spool)
    out = {"converted": 0, "lines": 0, "failed": 0, "retrying": 0}
    with ops_lock(root):
        for sealed in seg.listing(root, seg.SEALED):
            if not _due(sealed, now):
                continue
            try:
                _ready, lines = seg.convert_sealed(sealed)
            except Exception as e:  # noqa: BLE001 - one bad segment must not block the others
                # Frames that cannot be converted are kept aside one by one (failed/*.frames):
                # what fails the whole segment is the disk, so it is always tried again.
                record_failure(root, sealed, e, may_set_aside=False)
                continue
            _succeeded(sealed)
            out["converted"] += 1
            out["lines"] += lines
        out["retrying"] = _retrying(root)
    return out


# Ready segments are ingested together, so that many small ones cost one parse and one
# transaction (ingest reads small files as one batch) rather than one each; a chunk holds the
# warehouse for one ingest, so reports still get their turn between chunks.
CHUNK_BYTES = 64 << 20
CHUNK_SEGMENTS = 1000


def _chunks(paths: list[Path]) -> list[list[Path]]:
    out, cur, size = [], [], 0
    for p in paths:
        try:
            size += p.stat().st_size
        except FileNotFoundError:
            continue
        cur.append(p)
        if size >= CHUNK_BYTES or len(cur) >= CHUNK_SEGMENTS:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def _ingest(db: str, paths: list[Path]) -> dict:
    """One ingest of ``paths``: its summary, or ``{"error": error}``. SchemaError (a busy or
    unusable warehouse) is raised: the cycle ends."""
    from kvtrace.ingest import IngestSummary, ingest
    from kvtrace.store import open_store

    # Another process (a report, a manual ingest) may hold the file: Store waits for it.
    summary = IngestSummary()
    try:
        with open_store(db, lock_wait_s=STORE_RETRY_SECONDS) as store:
            return ingest(store, paths, format="otlp-json", summary=summary).to_dict()
    except SchemaError:
        raise
    except Exception as e:  # noqa: BLE001 - a full disk is retried; one unreadable segment must not block the rest
        # the counts of what was stored before the failure (its segments are in the ledger)
        return {"error": e, "stored": summary.to_dict()}


def ingest_segments(spool: str, db: str, keep_seconds: float, now: bool = False) -> dict:
    """Ingest every ready segment into ``db`` and archive it (with ``now``, those in a backoff too).

    Segments go in chunks (``CHUNK_BYTES``, ``CHUNK_SEGMENTS``), one ingest each; a segment that
    failed before goes alone. When a chunk's ingest fails, its segments are ingested one by one,
    so that only the one at fault waits for a retry (or is set aside); those the chunk stored
    before the failure are in the ledger and add nothing twice (their counts come from the
    chunk's ingest).

    Returns:
        Totals: ``segments``, ``requests_added``, ``metric_points_added``, ``duplicates_skipped``,
        ``lines_rejected``, ``rejects`` (first few), ``failed`` (set aside), ``retrying``. The
        rejects are the parse's own, as ``kvtrace ingest`` reports them: the receiver judges no
        record, so these are the only ones.
    """
    root = Path(spool)
    done_dir = root / seg.INGESTED_DIR
    done_dir.mkdir(mode=0o700, exist_ok=True)

    totals = {
        "segments": 0,
        "requests_added": 0,
        "metric_points_added": 0,
        "duplicates_skipped": 0,
        "lines_rejected": 0,
        "rejects": [],
        "failed": 0,
        "retrying": 0,
    }
    with ops_lock(root):
        due = [r for r in seg.listing(root, seg.READY) if _due(r, now)]
        # a segment that failed before goes alone, so that it cannot fail a chunk of others
        again = [r for r in due if str(r) in _retry]
        for chunk in [[r] for r in again] + _chunks([r for r in due if str(r) not in _retry]):
            s = _ingest(db, chunk)
            if "error" not in s:
                _done(root, chunk, done_dir, s, totals)
                continue
            if len(chunk) == 1:
                totals["failed"] += record_failure(root, chunk[0], s["error"]) == "set_aside"
                continue
            _add(totals, s.get("stored") or {})  # what the chunk stored before it failed
            for ready in chunk:
                s = _ingest(db, [ready])
                if "error" in s:
                    totals["failed"] += record_failure(root, ready, s["error"]) == "set_aside"
                else:
                    _done(root, [ready], done_dir, s, totals)
        prune(done_dir, keep_seconds)
        totals["retrying"] = _retrying(root)
    return totals


def _done(root: Path, stored: list[Path], done_dir: Path, s: dict, totals: dict) -> None:
    """Segments are stored: move them to ingested/ (durably) and add their counts to the cycle's."""
    for ready in stored:
        _succeeded(ready)
        os.replace(ready, done_dir / (seg.segment_id(ready) + seg.DONE))
    seg.fsync_dir(done_dir)
    seg.fsync_dir(root)
    totals["segments"] += len(stored)
    _add(totals, s)


def _add(totals: dict, s: dict) -> None:
    """An ingest's counts added to the cycle's."""
    for k in ("requests_added", "metric_points_added", "duplicates_skipped", "lines_rejected"):
        totals[k] += s.get(k, 0)
    totals["rejects"].extend((s.get("rejects") or [])[: max(0, 10 - len(totals["rejects"]))])


def prune(done_dir: Path, keep_seconds: float) -> int:
    """Delete ingested segments older than ``keep_seconds``."""
    cutoff = time.time() - keep_seconds
    n = 0
    for p in done_dir.glob("seg-*" + seg.DONE):
        try:
            if p.stat().st_mtime < cutoff:
                p.unlink()
                n += 1
        except FileNotFoundError:
            pass
    return n


OPS = {"finish": finish_segments, "ingest": ingest_segments}


class WorkerError(RuntimeError):
    """The worker process died or an operation in it failed (the segments stay for a retry)."""


class Worker:
    """The worker process (``python -m kvtrace.collect.worker``), started on first use and after a death.

    Requests and answers are JSON lines on its stdin/stdout. Calls come from one thread (the
    collector's maintenance thread), which on Linux is also what the worker's life is tied to.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None

    def call(self, op: str, *args):
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "kvtrace.collect.worker", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        try:
            self._proc.stdin.write(json.dumps({"op": op, "args": list(args)}).encode() + b"\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except OSError:
            line = b""
        if not line:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            raise WorkerError(f"the worker process died during '{op}'")
        answer = json.loads(line)
        if "error" in answer:
            raise WorkerError(answer["error"])
        return answer["ok"]

    def close(self, timeout: float = 60.0) -> None:
        if self._proc is None:
            return
        try:
            self._proc.stdin.close()
            self._proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        self._proc = None


def main() -> None:
    _init_worker(int(sys.argv[1]))
    proto = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # only answers go to the protocol pipe
    logging.basicConfig(level=logging.WARNING, format="kvtrace collect worker: %(message)s")
    for line in sys.stdin.buffer:
        req = json.loads(line)
        try:
            answer = {"ok": OPS[req["op"]](*req["args"])}
        except Exception as e:  # noqa: BLE001 - reported to the collector, which retries later
            answer = {"error": f"{type(e).__name__}: {e}"}
        proto.write(json.dumps(answer).encode() + b"\n")
        proto.flush()


if __name__ == "__main__":
    main()
