"""Report generation on a 10 M-request warehouse: the commands a platform team runs, whole processes.

The warehouse holds a week of Claude Code-like telemetry with chain-consistent token counts
(``bench_reuse.make_telemetry``: sessions of growing conversations, reads within the 5 min TTL),
10 M request rows in the ``requests`` table. It is built once and kept in ``bench/data/``.

Each measurement is a fresh ``kvtrace`` process (imports, JIT start-up, the JavaScript bundle
cache as a user would have it warm), timed wall-clock with its peak RSS:

1. ``report_json``: ``kvtrace report --format json`` over the week (token mix, daily series).
2. ``report_html``: the same as the self-contained HTML page (charts inlined).
3. ``report_html_ttl``: ``--ttl 5m,1h --format html``: derived prefix chains, TTL what-if,
   working set, reuse profile and spend over all 10 M requests, then the page.
4. ``run_daily``: ``kvtrace run`` of a ``last 1d`` profile (one day, ~1/7 of the rows) writing
   HTML, JSON, Markdown and PNG, and the index.
5. ``run_weekly``: the same profile over ``last 7d`` (all rows).

``KVTRACE_BENCH_QUICK=1`` uses 200 k requests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import child

ROOT = Path(__file__).resolve().parents[1]
N = 200_000 if os.environ.get("KVTRACE_BENCH_QUICK") else 10_000_000
DATA = ROOT / "bench" / "data"
KVTRACE = [sys.executable, "-m", "kvtrace"]


def build_warehouse(path: Path, n: int, weeks: int = 1) -> dict:
    """The bench warehouse of ``n`` requests a week (reused when it already holds them all).
    Each further week is another fleet (its own seed, request keys and sessions) starting 3 days
    after the previous one, so weeks overlap as a growing organisation's would."""
    import duckdb

    from kvtrace.store import Store

    if path.exists():
        try:
            with duckdb.connect(str(path), read_only=True) as con:
                same = con.execute("SELECT count(*) FROM requests").fetchone()[0] == n * weeks
        except duckdb.Error:
            same = False
        if same:
            Store(path).close()  # apply any newer migration
            return {"reused": True}
        path.unlink()
    from bench.bench_reuse import make_telemetry

    gen_s = insert_s = 0.0
    with Store(path) as store:
        for week in range(weeks):
            t = time.perf_counter()
            tel = make_telemetry(n, seed=1 + week).to_arrow()
            gen_s += time.perf_counter() - t
            t = time.perf_counter()
            store.con.register("tel", tel)
            key, sess = (f"'{week}:' || ", f"'{week}-' || ") if week else ("", "")  # week 0 as a 1-week warehouse
            store.run(f"""
                INSERT INTO requests BY NAME
                SELECT {key}request_key AS request_key, make_timestamp(ts_us + {week * 3 * 86400_000_000}) AS ts,
                       'bench' AS source, 'claude-code' AS agent, {sess}session_id AS session_id, thread_id,
                       'u' || (hash(session_id) % 400) AS user_id, org_id, model,
                       query_source, input_tokens, read_tokens AS cache_read_tokens,
                       write_5m_tokens AS cache_write_5m_tokens, write_1h_tokens AS cache_write_1h_tokens,
                       0 AS cache_write_unknown_tokens, output_tokens, 'bench:' || request_key AS ingested_from
                FROM tel""")
            store.con.unregister("tel")
            del tel
            store.run("CHECKPOINT")
            insert_s += time.perf_counter() - t
    return {
        "reused": False,
        "generate_s": round(gen_s, 2),
        "insert_s": round(insert_s, 2),
        "file_mb": round(path.stat().st_size / 1e6, 1),
    }


def timed(cmd: list[str]) -> dict:
    """Wall time and peak RSS of one process."""
    c = child.run(cmd, cwd=ROOT)
    return {
        "wall_s": round(c.wall_s, 2),
        "peak_rss_mb": round(c.maxrss_mb, 1),
        "stdout": c.stdout.decode(errors="replace").strip()[-300:],
    }


def _bounds(db: Path) -> tuple[str, str]:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        first, last = con.execute("SELECT min(ts), max(ts) FROM requests").fetchone()
    return first.isoformat(), last.isoformat()


def main() -> dict:
    from datetime import datetime, timedelta

    DATA.mkdir(parents=True, exist_ok=True)
    db = DATA / f"report-{N}.duckdb"
    result: dict = {"requests": N, "warehouse": build_warehouse(db, N)}
    first, last = _bounds(db)
    result["span"] = [first, last]
    # Warm the user's chart-bundle cache as any second report would find it (the first pays ~3 s).
    subprocess.run([sys.executable, "-c", "from kvtrace.report.html import js_bundle; js_bundle()"], check=True)
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-report-") as tmp:
        tmp = Path(tmp)
        base = [*KVTRACE, "report", "--db", str(db)]
        result["report_json"] = timed([*base, "--format", "json", "--out", str(tmp / "r.json")])
        result["report_html"] = timed([*base, "--format", "html", "--out", str(tmp / "r.html")])
        result["report_html_ttl"] = timed([*base, "--ttl", "5m,1h", "--format", "html", "--out", str(tmp / "t.html")])
        result["report_html_ttl"]["html_mb"] = round((tmp / "t.html").stat().st_size / 1e6, 2)
        end = datetime.fromisoformat(last).replace(hour=0, minute=0, second=0, microsecond=0)
        for name, window, at in (("run_daily", "last 1d", end), ("run_weekly", "last 7d", end + timedelta(days=1))):
            prof = tmp / f"{name}.toml"
            prof.write_text(
                f'[inputs]\nwarehouse = "{db}"\n[window]\nperiod = "{window}"\n'
                f'[analysis]\nttls = ["5m", "1h"]\ngroup_by = ["model"]\n'
                f'[output]\nroot = "{tmp / "out"}"\nformats = ["html", "json", "md", "png"]\n'
            )
            result[name] = timed([*KVTRACE, "run", str(prof), "--at", at.isoformat()])
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
