"""A month at fleet scale: ``kvtrace report --ttl 5m,1h`` on 100 M requests.

The warehouse holds ten of ``bench_report``'s 10 M-request weeks, each its own fleet (seed,
request keys, sessions) starting 3 days after the one before: 100 M requests over 34 days,
a 2.4 GB warehouse built once into ``bench/data/`` (about 4 minutes). The report runs as a
whole process: wall time and peak RSS (the per-request numbers the derivation spills to its
temporary files are the page cache's, not the process's).

Not part of ``python -m bench`` (it needs ~15 GB of disk and ~15 minutes): run it with
``python -m bench report_month``. ``KVTRACE_BENCH_QUICK=1`` uses ten weeks of 200 k requests.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from bench.bench_report import DATA, KVTRACE, _bounds, build_warehouse, timed

DEFAULT = False  # not in `python -m bench`: name it
WEEK = 200_000 if os.environ.get("KVTRACE_BENCH_QUICK") else 10_000_000
WEEKS = 10


def main() -> dict:
    DATA.mkdir(parents=True, exist_ok=True)
    db = DATA / f"report-month-{WEEK * WEEKS}.duckdb"
    result: dict = {"requests": WEEK * WEEKS, "warehouse": build_warehouse(db, WEEK, WEEKS)}
    result["span"] = list(_bounds(db))
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-month-") as tmp:
        out = Path(tmp) / "r.json"
        result["report_json_ttl"] = timed(
            [*KVTRACE, "report", "--db", str(db), "--ttl", "5m,1h", "--format", "json", "--out", str(out)]
        )
    result["goals"] = {"wall_s": 900, "peak_rss_mb": 4000 * 1e6 / 2**20}
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2), file=sys.stdout)
