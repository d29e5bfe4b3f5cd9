"""The reuse report on Spark (local mode, this machine) against the local path, 10 M requests.

The input is the report benchmark's warehouse (``bench_report.build_warehouse``: a week of
Claude Code-like telemetry). Each step is a fresh process, timed wall-clock with its peak RSS
(the largest single process of its tree: for Spark the driver's Python or the JVM):

1. ``lake``: ``kvtrace lake`` of the warehouse (requests and the chain rows Spark reads).
2. ``local``: ``kvtrace reuse --ttl 5m,1h --format json`` on the warehouse.
3. ``spark``: the same report from the lake on Spark, ``--spark-master local[2]``; its JSON must
   equal the local one but for ``source`` (``equal``).
4. ``spark_tasks``: the Spark derivation alone, for the partition count, the largest resident
   size a Spark task's Python worker reached, and the JVM's (driver and executors in local mode).

The goal (issue #16): ``spark`` within 3x of ``local``, each task's memory bounded by its
partition. ``KVTRACE_BENCH_QUICK=1`` uses 200 k requests.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from bench import child
from bench.bench_report import DATA, KVTRACE, N, ROOT, build_warehouse, timed

TASKS = """
import json, sys
from kvtrace.analyze.spark import lake_block_trace, spark_session
stats = {}
with spark_session("local[2]") as spark:
    trace = lake_block_trace(spark, sys.argv[1], stats=stats)
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    hwm = [l for l in open(f"/proc/{jvm}/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({**stats, "requests": trace.n_requests, "jvm_peak_rss_bytes": int(hwm) * 1024}))
"""


def main() -> dict:
    DATA.mkdir(parents=True, exist_ok=True)
    db = DATA / f"report-{N}.duckdb"
    result: dict = {"requests": N, "warehouse": build_warehouse(db, N)}
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-spark-") as tmp:
        tmp = Path(tmp)
        lake = tmp / "lake"
        result["lake"] = timed([*KVTRACE, "lake", str(lake), "--db", str(db)])
        reuse = [*KVTRACE, "reuse", "--ttl", "5m,1h", "--format", "json", "--out"]
        result["local"] = timed([*reuse, str(tmp / "local.json"), "--db", str(db)])
        spark = ["--engine", "spark", "--lake", str(lake), "--spark-master", "local[2]"]
        result["spark"] = timed([*reuse, str(tmp / "spark.json"), *spark])
        got, want = (json.loads((tmp / f"{k}.json").read_text()) for k in ("spark", "local"))
        result["equal"] = {k: v for k, v in got.items() if k != "source"} == {
            k: v for k, v in want.items() if k != "source"
        }
        c = child.run([sys.executable, "-c", TASKS, str(lake)], cwd=ROOT)
        tasks = json.loads(c.stdout)
        result["spark_tasks"] = {
            "wall_s": round(c.wall_s, 2),
            "peak_rss_mb": round(c.maxrss_mb, 1),
            "partitions": tasks["partitions"],
            "task_peak_rss_mb": round(tasks["task_peak_rss_bytes"] / 2**20, 1),
            "jvm_peak_rss_mb": round(tasks["jvm_peak_rss_bytes"] / 2**20, 1),
        }
    result["spark_over_local"] = round(result["spark"]["wall_s"] / result["local"]["wall_s"], 2)
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
