"""A month at fleet scale: ``kvtrace replay --sample 1%`` on 100 M requests.

A synthetic fleet of 100 M requests over 30 days (``bench_replay.make_fleet``'s ``agents``
shape: sessions of ~16 turns 20 s apart, 70% share a 4-block head; ~2.3 G block accesses) is
saved as ``.npz`` (13 GB: ids int32), then ``kvtrace replay month.npz --sample 1%`` runs as a
whole process, twice (wall time, peak RSS: the RSS counts the pages of the trace file it maps,
which are the page cache's to drop). The exact grid is not run at this size: the sampled grid's
error is measured at 10 M requests (``bench_sample``).

Not part of ``python -m bench`` (it needs ~14 GB of disk, ~17 GB of memory to generate the
fleet and ~10 minutes): run it with ``python -m bench sample_month``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from bench import child
from bench.bench_sample import fleet_file

DEFAULT = False  # not in `python -m bench`: name it
ROOT = Path(__file__).resolve().parents[1]
QUICK = bool(os.environ.get("KVTRACE_BENCH_QUICK"))
N = 300_000 if QUICK else 100_000_000
DAYS = 30
RUNS = 1 if QUICK else 2


def main() -> dict:
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-month-") as tmp:
        path = Path(tmp) / "month.npz"
        info = fleet_file(N, "agents", path, DAYS)
        runs = []
        for k in range(RUNS):
            res = Path(tmp) / f"s{k}.json"
            c = child.run(
                [
                    sys.executable,
                    "-m",
                    "kvtrace",
                    "replay",
                    str(path),
                    "--sample",
                    "1%",
                    "--format",
                    "json",
                    "--out",
                    str(res),
                ],
                cwd=ROOT,
            )
            out = json.loads(res.read_text())
            runs.append(
                {
                    "wall_s": round(c.wall_s, 1),
                    "cpu_s": round(c.cpu_s, 1),
                    "peak_rss_mb": round(c.maxrss_mb),
                    "engine": out["engine"],
                    "stated_error": round(out["sample"]["expected_error"], 5),
                    "sampled_accesses": out["sample"]["sampled_accesses"],
                    "hit_ratio_tokens_unlimited_no_ttl": round(out["grid"][-1]["hit_ratio_tokens"], 4),
                }
            )
        info.update(quick=QUICK, sample_1pct=runs, goal_s=120)
        return info


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
