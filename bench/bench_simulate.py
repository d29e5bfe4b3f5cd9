"""``kvtrace simulate --scenario seed-study``: two hours of the seed-study workload under the three
configurations (GPU only, +512 GB DRAM, +NVMe RAID10), as one whole process.

Target: at most 30 s on a 2-core machine (at least 720x faster than real time per node and
configuration), with memory bounded by the live sessions. Reported: wall and CPU time and peak RSS
of the process (best of ``REPEATS``), the speed-up over real time, and the headline figures of the
run so a change in the model shows next to a change in speed. ``KVTRACE_BENCH_QUICK=1`` simulates
30 minutes once.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from bench import child

ROOT = Path(__file__).resolve().parents[1]
QUICK = bool(os.environ.get("KVTRACE_BENCH_QUICK"))
DURATION = "30m" if QUICK else "2h"
REPEATS = 1 if QUICK else 3


def main() -> dict:
    runs = []
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-") as tmp:
        out = Path(tmp) / "seed.json"
        for _ in range(REPEATS):
            c = child.run(
                [
                    sys.executable,
                    "-m",
                    "kvtrace",
                    "simulate",
                    "--scenario",
                    "seed-study",
                    "--duration",
                    DURATION,
                    "--format",
                    "json",
                    "--out",
                    str(out),
                ],
                cwd=ROOT,
            )
            runs.append(c)
        doc = json.loads(out.read_text())
    best = min(runs, key=lambda c: c.wall_s)
    sim_s = doc["duration_s"] * len(doc["configs"])
    return {
        "scenario": "seed-study",
        "duration_s": doc["duration_s"],
        "configs": [c["name"] for c in doc["configs"]],
        "wall_s": round(best.wall_s, 2),
        "cpu_s": round(best.cpu_s, 2),
        "maxrss_mb": round(best.maxrss_mb, 1),
        "walls_s": [round(c.wall_s, 2) for c in runs],
        "target_wall_s": 30.0,
        "speedup_vs_real_time_per_config": round(sim_s / best.wall_s, 1),
        "figures": {
            c["name"]: {
                "peak_tokens_per_s": round(c["peak_tokens_per_s"]),
                "steady_tokens_per_s": round(c["steady_tokens_per_s"]),
                "requests_started": c["requests_started"],
            }
            for c in doc["configs"]
        },
    }
