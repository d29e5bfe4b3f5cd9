"""Many small OTLP JSON files: ``kvtrace ingest FOLDER`` of one export request per file.

The sample OTLP log file (``sample_traces/otlp/logs.jsonl.gz``: 1,989 export requests, 1,947
api_request events) split one line per file, as an exporter or a collector writing small
segments leaves them. Measured as a child process into a fresh on-disk warehouse (start-up,
parse, merge, commit); then a repeat ingest of the unchanged folder, and the same lines as one
file for reference. The stored requests must equal the one-file ingest's (1,947).

A second phase times the collector's worker on the same lines as a spool of ready segments
(``kvtrace.collect.worker.ingest_segments``, in a child process, timed inside it: the worker is
a long-lived process, so its start-up is not part of a cycle): segments per second.

Environment: ``KVTRACE_BENCH_REPEATS`` (default 3; the median is reported), ``KVTRACE_BENCH_FILES``
(fewer files: the first N lines), ``KVTRACE_BENCH_QUICK=1`` (200 files, 1 repeat).
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench import child

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "otlp" / "logs.jsonl.gz"
_SCRIPT = Path(sys.executable).parent / "kvtrace"
KVTRACE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kvtrace"]


def _ingest(path: Path, db: Path) -> dict:
    c = child.run(KVTRACE + ["ingest", path, "--db", db, "--json", "--quiet"], cwd=REPO)
    return {
        "wall_s": round(c.wall_s, 3),
        "cpu_s": round(c.cpu_s, 3),
        "maxrss_mb": round(c.maxrss_mb),
        "summary": json.loads(c.stdout),
    }


_WORKER = """
import json, sys, time
from kvtrace.collect import worker
t = time.perf_counter()
r = worker.ingest_segments(sys.argv[1], sys.argv[2], 3600)
print(json.dumps({"in_process_s": time.perf_counter() - t, "totals": r}))
"""


def _worker_cycle(folder: Path, work: Path) -> dict:
    """One worker cycle over a spool holding ``folder``'s files as ready segments."""
    import shutil

    spool = work / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    shutil.copytree(folder, spool)
    db = work / "worker.duckdb"
    _fresh(db)
    c = child.run([sys.executable, "-c", _WORKER, spool, db], cwd=REPO)
    out = json.loads(c.stdout)
    return {
        "in_process_s": round(out["in_process_s"], 3),
        "wall_s": round(c.wall_s, 3),
        "segments": out["totals"]["segments"],
        "requests_added": out["totals"]["requests_added"],
    }


def _fresh(db: Path) -> None:
    for f in (db, db.with_suffix(".duckdb.wal")):
        f.unlink(missing_ok=True)


def main() -> dict:
    quick = os.environ.get("KVTRACE_BENCH_QUICK") == "1"
    repeats = 1 if quick else int(os.environ.get("KVTRACE_BENCH_REPEATS", "3"))
    lines = gzip.decompress(SAMPLE.read_bytes()).splitlines(keepends=True)
    if quick or os.environ.get("KVTRACE_BENCH_FILES"):
        lines = lines[: 200 if quick else int(os.environ["KVTRACE_BENCH_FILES"])]
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-small-") as tmp:
        work = Path(tmp)
        folder = work / "segments"
        folder.mkdir()
        for i, line in enumerate(lines):
            (folder / f"seg-{i:06d}.jsonl").write_bytes(line)
        one = work / "one.jsonl"
        one.write_bytes(b"".join(lines))
        db = work / "bench.duckdb"
        runs, repeat_runs, one_runs, worker_runs = [], [], [], []
        for _ in range(repeats):
            worker_runs.append(_worker_cycle(folder, work))
            _fresh(db)
            runs.append(_ingest(folder, db))
            repeat_runs.append(_ingest(folder, db))
            _fresh(db)
            one_runs.append(_ingest(one, db))
        stored = (
            {r["summary"]["requests_added"] for r in runs}
            | {r["summary"]["requests_added"] for r in one_runs}
            | {r["requests_added"] for r in worker_runs}
        )
        if len(stored) != 1 or any(r["summary"]["requests_added"] for r in repeat_runs):
            raise RuntimeError(f"stored requests differ: files {runs[0]['summary']}, one file {one_runs[0]['summary']}")
    med = lambda rs, k="wall_s": round(statistics.median(r[k] for r in rs), 3)  # noqa: E731
    result = {
        "files": len(lines),
        "requests": stored.pop(),
        "repeats": repeats,
        "folder_first_ingest_s": med(runs),
        "folder_first_ingest_cpu_s": med(runs, "cpu_s"),
        "per_file_ms": round(1000 * med(runs) / len(lines), 2),
        "folder_repeat_ingest_s": med(repeat_runs),
        "one_file_ingest_s": med(one_runs),
        "worker_cycle_s": med(worker_runs, "in_process_s"),
        "worker_segments_per_s": round(len(lines) / med(worker_runs, "in_process_s")),
        "runs": runs,
        "worker_runs": worker_runs,
        "load_average": os.getloadavg(),
    }
    print(
        f"   {len(lines)} files: {result['folder_first_ingest_s']} s ({result['per_file_ms']} ms/file); "
        f"repeat {result['folder_repeat_ingest_s']} s; one file {result['one_file_ingest_s']} s; "
        f"collector worker {result['worker_cycle_s']} s ({result['worker_segments_per_s']} segments/s)",
        file=sys.stderr,
    )
    return result
