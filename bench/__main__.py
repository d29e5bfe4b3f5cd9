"""Run the benchmarks: ``python -m bench`` (all but the largest) or ``python -m bench transcripts otlp``.

Each ``bench/bench_<name>.py`` module's ``main()`` returns a JSON-able dict, written to
``bench/results/<name>.json`` (atomically, so an interrupted run leaves the last good result).
Set ``KVTRACE_BENCH_QUICK=1`` for small inputs (a smoke run, figures not meaningful).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def available() -> list[str]:
    return sorted(p.stem[len("bench_") :] for p in HERE.glob("bench_*.py"))


def run(name: str) -> dict:
    mod = importlib.import_module(f"bench.bench_{name}")
    t = time.perf_counter()
    result = mod.main()
    result.setdefault("bench_wall_s", round(time.perf_counter() - t, 2))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, out)
    return result


def default() -> list[str]:
    """The benchmarks ``python -m bench`` runs: all but those whose module sets ``DEFAULT = False``
    (too large to run every time; name them)."""
    return [n for n in available() if getattr(importlib.import_module(f"bench.bench_{n}"), "DEFAULT", True)]


def main(argv: list[str]) -> int:
    names = argv or default()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    for name in names:
        print(f"== bench {name}", file=sys.stderr, flush=True)
        run(name)
        print(f"   wrote {(RESULTS / (name + '.json')).relative_to(HERE.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
