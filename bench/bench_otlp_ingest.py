"""OTLP JSON ingest throughput against the parse floor, on generated files of 200+ MB.

The floor is what any reader of the file must at least do: ``orjson.loads`` of every line plus
a count of the log records. Against it, ``kvtrace ingest FILE`` end to end, as a whole process
(start-up, parse, merge into a fresh on-disk warehouse, commit). Both run as child processes,
alternately, several times after a warm-up read (page cache warm); records/s is log records
divided by wall time, peak RSS and CPU seconds come from ``os.wait4`` of each child. The load
average is recorded: on a busy machine the wall-time ratio says more about the neighbours than
about kvtrace, and the CPU-seconds ratio (the work done) is the steadier figure.

Two shapes of the same records, from ``kvtrace synth`` (Claude Code's attribute sets; the goal
is ingest >= 0.5x the floor's records/s):

* ``sdk``: as the Python OTLP JSON file exporter writes them, one ``export()`` per line;
* ``collector``: re-batched as the Collector ``file`` exporter writes them, records of several
  processes per line (64: what a batch processor's 200 ms timeout gathers from a fleet of about
  a thousand developers; the floor slows down 8x on multi-MB lines, which would flatter kvtrace).

Environment: ``KVTRACE_BENCH_QUICK=1`` (a few MB, 2 repeats), ``KVTRACE_BENCH_REPEATS``,
``KVTRACE_BENCH_DAYS`` (days of synthetic traffic; 2 give ~490 MB and ~290 k api_request events).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import child

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "data"
_SCRIPT = Path(sys.executable).parent / "kvtrace"
KVTRACE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kvtrace"]
SEED = 7
COLLECTOR_BATCH = 64  # log records per line in the collector shape (see _rebatch)

FLOOR = r"""
import sys, time, orjson
t = time.perf_counter()
n = 0
with open(sys.argv[1], "rb") as fh:
    for line in fh:
        d = orjson.loads(line)
        for rl in d.get("resourceLogs", ()):
            for sl in rl.get("scopeLogs", ()):
                n += len(sl.get("logRecords", ()))
print(n, time.perf_counter() - t)
"""


# -- processes -----------------------------------------------------------------------------------


def _run(argv: list[str]) -> dict:
    c = child.run(argv, cwd=REPO)
    return {"wall_s": c.wall_s, "cpu_s": c.cpu_s, "maxrss_mb": c.maxrss_mb, "stdout": c.stdout}


def _floor(path: Path) -> dict:
    r = _run([sys.executable, "-c", FLOOR, path])
    n, loop = r["stdout"].split()
    return {**r, "records": int(n), "loop_s": float(loop)}


def _ingest(path: Path, work: Path) -> dict:
    db = work / "bench.duckdb"
    for f in (db, db.with_suffix(".duckdb.wal")):
        f.unlink(missing_ok=True)
    r = _run(KVTRACE + ["ingest", path, "--db", db, "--json", "--quiet"])
    summary = json.loads(r["stdout"])
    db.unlink(missing_ok=True)
    return {**r, "summary": summary}


# -- inputs --------------------------------------------------------------------------------------


def _synth(days: float) -> Path:
    """``kvtrace synth`` OTLP output (cached in bench/data)."""
    root = DATA / f"otlp-synth-{days:g}d-seed{SEED}"
    logs = root / "otlp" / "logs.jsonl"
    if logs.is_file() and (root / "synth-run.md").is_file():
        return logs
    t = time.perf_counter()
    subprocess.run(
        KVTRACE
        + [
            "synth",
            "--preset",
            "seed-study",
            "--days",
            f"{days:g}",
            "--seed",
            str(SEED),
            "--format",
            "otlp",
            "--out",
            str(root),
            "--quiet",
        ],
        check=True,
        cwd=REPO,
    )
    print(f"   synth: {logs.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.0f}s: {logs}", file=sys.stderr)
    return logs


def _rebatch(src: Path, batch: int = COLLECTOR_BATCH) -> Path:
    """The same records as the Collector file exporter writes them: several processes' records
    per line, the resources of one batch side by side (int64 values stay decimal strings)."""
    import orjson

    dst = src.with_name(f"logs-collector-{batch}.jsonl")
    if dst.is_file() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    tmp = dst.with_suffix(".tmp")
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        resources, n = [], 0
        for line in fin:
            for rl in orjson.loads(line).get("resourceLogs", ()):
                resources.append(rl)
                n += sum(len(sl.get("logRecords", ())) for sl in rl.get("scopeLogs", ()))
            if n >= batch:
                fout.write(orjson.dumps({"resourceLogs": resources}) + b"\n")
                resources, n = [], 0
        if resources:
            fout.write(orjson.dumps({"resourceLogs": resources}) + b"\n")
    os.replace(tmp, dst)
    return dst


def _quick_input() -> Path:
    root = DATA / f"otlp-synth-quick-seed{SEED}"
    logs = root / "otlp" / "logs.jsonl"
    if not logs.is_file():
        subprocess.run(
            KVTRACE
            + [
                "synth",
                "--preset",
                "seed-study",
                "--days",
                "0.05",
                "--seed",
                str(SEED),
                "--format",
                "otlp",
                "--out",
                str(root),
                "--quiet",
            ],
            check=True,
            cwd=REPO,
        )
    return logs


# -- measurement ---------------------------------------------------------------------------------


def _stats(xs: list[float]) -> dict:
    return {"min": round(min(xs), 3), "median": round(statistics.median(xs), 3), "runs": len(xs)}


def _measure(path: Path, reps: int, work: Path) -> dict:
    with open(path, "rb") as fh:  # warm the page cache for both contenders
        while fh.read(64 << 20):
            pass
    floors, ingests = [], []
    for _ in range(reps):
        floors.append(_floor(path))
        ingests.append(_ingest(path, work))
    records = floors[0]["records"]
    s = ingests[0]["summary"]
    floor_loop = [f["loop_s"] for f in floors]
    ingest_wall = [i["wall_s"] for i in ingests]
    ratio_median = statistics.median(floor_loop) / statistics.median(ingest_wall)
    return {
        "file": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
        "bytes": path.stat().st_size,
        "lines": sum(1 for _ in open(path, "rb")),
        "log_records": records,
        "requests_added": s["requests_added"],
        "metric_points_added": s["metric_points_added"],
        "lines_rejected": s["lines_rejected"],
        "unknown_records": s["unknown_records"],
        "floor": {
            "loop_s": _stats(floor_loop),
            "process_wall_s": _stats([f["wall_s"] for f in floors]),
            "cpu_s": _stats([f["cpu_s"] for f in floors]),
            "records_per_s_median": round(records / statistics.median(floor_loop)),
            "maxrss_mb": round(max(f["maxrss_mb"] for f in floors)),
        },
        "ingest": {
            "wall_s": _stats(ingest_wall),
            "cpu_s": _stats([i["cpu_s"] for i in ingests]),
            "records_per_s_median": round(records / statistics.median(ingest_wall)),
            "maxrss_mb": round(max(i["maxrss_mb"] for i in ingests)),
        },
        # Each round runs the floor then the ingest back to back, so both see the same load.
        "ratio_per_round": [round(f / i, 3) for f, i in zip(floor_loop, ingest_wall)],
        "ratio_median": round(ratio_median, 3),
        "ratio_best": round(min(floor_loop) / min(ingest_wall), 3),
        # CPU seconds, whole processes: the work, whatever else the machine runs (ingest uses
        # two threads for parsing, so on an idle machine its wall time is below its CPU time).
        "cpu_ratio_median": round(
            statistics.median(f["cpu_s"] for f in floors) / statistics.median(i["cpu_s"] for i in ingests), 3
        ),
    }


def main() -> dict:
    quick = os.environ.get("KVTRACE_BENCH_QUICK") == "1"
    reps = int(os.environ.get("KVTRACE_BENCH_REPEATS", "2" if quick else "3"))
    days = float(os.environ.get("KVTRACE_BENCH_DAYS", "2"))
    sdk = _quick_input() if quick else _synth(days)
    inputs = {"sdk": sdk, "collector": _rebatch(sdk)}
    out = {
        "goal": "ingest records/s >= 0.5x the floor's (orjson.loads of every line + a count of log records)",
        "quick": quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg()[0],
        },
        "command": "kvtrace ingest FILE --db fresh.duckdb --json --quiet",
        "inputs": {},
    }
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-") as tmp:
        for name, path in inputs.items():
            r = _measure(path, reps, Path(tmp))
            out["inputs"][name] = r
            print(
                f"   {name}: {r['bytes'] / 1e6:.0f} MB, {r['log_records']} log records; floor "
                f"{r['floor']['records_per_s_median']}/s, ingest {r['ingest']['records_per_s_median']}/s "
                f"(peak {r['ingest']['maxrss_mb']} MB): {r['ratio_median']}x the floor "
                f"(per round {r['ratio_per_round']}; CPU seconds {r['cpu_ratio_median']}x)",
                file=sys.stderr,
            )
    out["machine"]["load_avg_at_end"] = os.getloadavg()[0]
    out["ratio_median_worst_input"] = min(r["ratio_median"] for r in out["inputs"].values())
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
