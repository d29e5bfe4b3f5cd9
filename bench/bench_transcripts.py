"""Claude Code transcripts: kvtrace side by side with ccusage on generated ~300 MB trees.

Two tree shapes (``bench.transcript_tree.SHAPES``): ``default`` (older builds, progress lines,
bulky responses; 316 MB, 43 k responses) and ``current`` (2.1.197's record set: queue-operation,
last-prompt, attachment lines, no progress lines; long-tailed sessions of terse responses; 291 MB,
63 k responses).

Measures, as whole processes with repeats (min / median of N, after a warm-up, page cache warm):

* **first run**, on each shape (the shapes and tools interleaved in each round, so each pair
  sees the same load): ``kvtrace ingest <tree>/projects`` into a fresh warehouse + ``kvtrace
  report --group-by day --format json``, against ``ccusage daily --json --offline``; wall and
  CPU (user + system) time;
* **first run, one line torn**, on each shape: the same with one more session file whose last
  line is cut inside a character (a session being written as the tree is read);
* on the default shape only: **repeat**: one new session file is added, then the same kvtrace pair on the kept warehouse
  (unchanged files are skipped), against ccusage again (it re-reads everything);
* **repeat in one process**: ``kvtrace report --ingest <tree>/projects --group-by day --format
  json`` after one new file, as one local process;
* **repeat served**: the same command while ``kvtrace serve`` runs for the warehouse (started before
  the timed runs and given one untimed call first; its start-up is not timed): the client's
  whole-process wall, against ccusage measured in the same rounds, and its JSON against the truth
  and against a local run's;
* **totals**: both tools' per-day and overall token totals against the generator's truth;
* where a repeat's time goes: ``python -X importtime`` of the ingest command and the report.

ccusage is ``node_modules/.bin/ccusage`` (``make tools``); without it only kvtrace is measured.
Environment: ``KVTRACE_BENCH_QUICK=1`` (20 MB trees, 2 repeats), ``KVTRACE_BENCH_MB`` (every
shape's size), ``KVTRACE_BENCH_REPEATS``, ``KVTRACE_BENCH_SHAPES`` (default ``default,current``;
the first is the one the repeats run on).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import child

from bench.transcript_tree import GENERATOR_VERSION, SHAPES, add_session, generate, summarize

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "data"
CCUSAGE = REPO / "node_modules" / ".bin" / "ccusage"
_SCRIPT = Path(sys.executable).parent / "kvtrace"
KVTRACE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kvtrace"]
# The kvtrace the commands run: the first on PYTHONPATH (another checkout, for a side-by-side
# run), else this one. In-process measurements import it too (python -P: not this folder's).
KV_ROOT = next(
    (Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and (Path(p) / "kvtrace").is_dir()), REPO
)
KV_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(
        dict.fromkeys([str(KV_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    ),
}
SEED = 7
# Each shape's size in MiB (generate's unit): 316 MB and 291 MB.
SHAPE_MB = {"default": 300, "current": 277}
KEYS = ("input", "cache_read", "cache_write", "output")


# -- processes -----------------------------------------------------------------------------------


def _run(argv: list[str], env: dict | None = None) -> tuple[float, int, bytes]:
    """Run a process; return (wall seconds, peak RSS in KiB, stdout)."""
    c = child.run(argv, cwd=REPO, env=env)
    return c.wall_s, round(c.maxrss_mb * 1024), c.stdout


def _stats(times: list[float]) -> dict:
    return {
        "min_s": round(min(times), 3),
        "median_s": round(statistics.median(times), 3),
        "mean_s": round(statistics.fmean(times), 3),
        "runs": len(times),
    }


INGEST_FORMAT: list[str] = []  # ["--input-format", "claude-transcript"] if auto-detection fails on the tree


def _auto_detect_fails(tree: Path, work: Path) -> str | None:
    """Whether ``kvtrace ingest`` of a projects tree needs --input-format (the error, if so)."""
    sample = next((tree / "projects").rglob("agent-*.meta.json"), None)
    if sample is None:
        return None
    probe = work / "probe" / "projects" / "p" / "s" / "subagents"
    probe.mkdir(parents=True)
    shutil.copy(sample, probe / sample.name)
    shutil.copy(sample.with_name(sample.name.replace(".meta.json", ".jsonl")), probe)
    try:
        _run(KVTRACE + ["ingest", str(work / "probe" / "projects"), "--db", str(work / "probe.duckdb"), "--quiet"])
    except RuntimeError as e:
        return str(e).strip().splitlines()[-1][-300:]
    return None


def _kvtrace_pair(tree: Path, db: Path, cpu: list | None = None) -> tuple[float, dict, float, int | None]:
    """ingest + daily report as two processes; returns (total wall, report, ingest wall, peak RSS KiB)
    and appends their CPU time (user + system) to ``cpu``."""
    a = child.run(KVTRACE + ["ingest", str(tree / "projects"), "--db", str(db), "--quiet", *INGEST_FORMAT], cwd=REPO)
    b = child.run(KVTRACE + ["report", "--db", str(db), "--group-by", "day", "--format", "json"], cwd=REPO)
    if cpu is not None:
        cpu.append(a.cpu_s + b.cpu_s)
    return a.wall_s + b.wall_s, json.loads(b.stdout), a.wall_s, round(max(a.maxrss_mb, b.maxrss_mb) * 1024) or None


def _ccusage(tree: Path, home: Path, cpu: list | None = None) -> tuple[float, dict, int | None]:
    # An empty HOME so ccusage finds no other agent's logs; UTC days like kvtrace's.
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CLAUDE_CONFIG_DIR": str(tree), "TZ": "UTC"}
    c = child.run([str(CCUSAGE), "daily", "--json", "--offline", "--timezone", "UTC"], cwd=REPO, env=env)
    if cpu is not None:
        cpu.append(c.cpu_s)
    return c.wall_s, json.loads(c.stdout), round(c.maxrss_mb * 1024) or None


def _ccusage_version() -> str:
    return subprocess.run([str(CCUSAGE), "--version"], capture_output=True, text=True).stdout.strip()


# -- totals --------------------------------------------------------------------------------------


def _truth_days(truth: dict) -> dict[str, dict]:
    return {
        d: {
            "input": v["input"],
            "cache_read": v["cache_read"],
            "cache_write": v["cache_write_5m"] + v["cache_write_1h"],
            "output": v["output"],
        }
        for d, v in truth["days"].items()
    }


def _kvtrace_days(report: dict) -> dict[str, dict]:
    out = {}
    for g in report["groups"]["day"]:
        m = g["token_mix"]
        out[str(g["key"])[:10]] = {
            "input": m["input_uncached"],
            "cache_read": m["cache_read"],
            "cache_write": m["cache_write_5m"] + m["cache_write_1h"] + m["cache_write_unknown"],
            "output": m["output"],
        }
    return out


def _ccusage_days(doc: dict) -> dict[str, dict]:
    return {
        d["period"]: {
            "input": d["inputTokens"],
            "cache_read": d["cacheReadTokens"],
            "cache_write": d["cacheCreationTokens"],
            "output": d["outputTokens"],
        }
        for d in doc["daily"]
    }


def _compare(got: dict[str, dict], want: dict[str, dict]) -> dict:
    tot = {k: sum(v[k] for v in got.values()) for k in KEYS}
    want_tot = {k: sum(v[k] for v in want.values()) for k in KEYS}
    bad_days = sorted(d for d in set(got) | set(want) if got.get(d) != want.get(d))
    return {
        "exact": not bad_days,
        "days": len(got),
        "days_differing": len(bad_days),
        "totals": tot,
        "diff_vs_truth": {k: tot[k] - want_tot[k] for k in KEYS},
        "ratio_vs_truth": {k: round(tot[k] / want_tot[k], 6) if want_tot[k] else None for k in KEYS},
    }


# -- the repeat through `kvtrace serve` ----------------------------------------------------------


def _report_ingest(tree: Path, db: Path) -> tuple[float, dict]:
    """``kvtrace report --ingest <tree>/projects`` as one client process."""
    wall, _, out = _run(
        KVTRACE
        + [
            "report",
            "--ingest",
            str(tree / "projects"),
            "--group-by",
            "day",
            "--format",
            "json",
            "--db",
            str(db),
            *INGEST_FORMAT,
        ]
    )
    return wall, json.loads(out)


def _start_server(db: Path, log: Path) -> subprocess.Popen:
    from kvtrace.serve.server import status

    proc = subprocess.Popen(
        KVTRACE + ["serve", "--db", str(db)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while status(db) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"kvtrace serve did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc


def _stop_server(proc: subprocess.Popen, db: Path) -> None:
    if proc.poll() is None:
        subprocess.run(KVTRACE + ["serve", "--stop", "--db", str(db)], capture_output=True, timeout=120)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _without(report: dict, key: str = "generated_at") -> dict:
    return {k: v for k, v in report.items() if k != key}


def _served_repeat(
    tree: Path,
    db: Path,
    home: Path,
    reps: int,
    seed: int,
    have_ccusage: bool,
    work: Path,
    added: list[Path],
    shape: str,
) -> tuple[dict, dict]:
    """The one-process repeat, locally and then through `kvtrace serve` (interleaved with ccusage);
    returns (results, truth per day of the sessions added here)."""
    extra: dict = {}
    local = []
    for i in range(reps):
        path, t = add_session(tree, seed=seed + i, shape=shape)
        extra.update(t)
        added.append(path)
        local.append(_report_ingest(tree, db)[0])
    out: dict = {"kvtrace_report_ingest_one_process": _stats(local)}
    proc = _start_server(db, work / "serve.log")
    served, cc = [], []
    try:
        _report_ingest(tree, db)  # untimed: nothing new; the server's first command
        for i in range(reps):
            path, t = add_session(tree, seed=seed + 100 + i, shape=shape)
            extra.update(t)
            added.append(path)
            wall, report = _report_ingest(tree, db)
            served.append(wall)
            if have_ccusage:
                cc.append(_ccusage(tree, home)[0])
        from kvtrace.serve.server import status

        info = status(db)
    finally:
        _stop_server(proc, db)
    _, local_report = _report_ingest(tree, db)  # the same warehouse, no server: nothing new to read
    out["kvtrace_served"] = _stats(served)
    out["server"] = {
        "commands": info["commands"] if info else None,
        "json_same_as_local_run": _without(report) == _without(local_report),
    }
    if have_ccusage:
        out["ccusage_daily_same_rounds"] = _stats(cc)
        out["speedup_ccusage_over_served_median"] = round(statistics.median(cc) / statistics.median(served), 2)
        out["speedup_ccusage_over_served_min"] = round(min(cc) / min(served), 2)
        out["speedup_ccusage_over_one_process_median"] = round(statistics.median(cc) / statistics.median(local), 2)
    out["_report"] = report
    return out, extra


# -- where a repeat's time goes ------------------------------------------------------------------


def _importtime(argv: list[str]) -> dict:
    """Import time of a kvtrace command: the total and the heaviest imports (cumulative ms, depth <= 2)."""
    p = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", "-m", "kvtrace", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=KV_ENV,
    )
    rows = []
    for line in p.stderr.splitlines():
        parts = line[len("import time:") :].split("|") if line.startswith("import time:") else []
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        raw = parts[2].rstrip()
        depth = (len(raw) - len(raw.lstrip()) - 1) // 2
        rows.append((raw.strip(), int(parts[1]) / 1000, depth))
    total = sum(ms for _, ms, d in rows if d == 0)
    heavy = sorted((r for r in rows if r[2] <= 2), key=lambda r: -r[1])[:12]
    return {
        "imports_total_ms": round(total, 1),
        "heaviest_ms": [{"module": m, "cumulative_ms": round(ms, 1), "depth": d} for m, ms, d in heavy],
    }


# Run in a child process: the library ingest with its phases timed by wrapping pipeline functions.
_PHASES_SCRIPT = """
import json, sys, time
from collections import defaultdict
t0 = time.perf_counter()
import kvtrace.ingest.claude_transcripts as ct
import kvtrace.ingest.pipeline as pl
from kvtrace.store import Store
spent = defaultdict(float)
def timed(name, fn):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[name] += time.perf_counter() - t
    return wrapper
ct.parse = timed("parse_s", ct.parse)
pl._merge = timed("merge_s", pl._merge)
pl._expand = timed("walk_s", pl._expand)
pl.sniff = timed("sniff_s", pl.sniff)
if hasattr(pl, "_record_files"):
    pl._record_files = timed("ledger_s", pl._record_files)
t1 = time.perf_counter()
store = Store(sys.argv[1])
t2 = time.perf_counter()
s = pl.ingest(store, [sys.argv[2]], format=sys.argv[3] or None)
t3 = time.perf_counter()
store.close()
t4 = time.perf_counter()
out = {"import_s": t1 - t0, "open_s": t2 - t1, "ingest_s": t3 - t2, "close_s": t4 - t3, **spent}
out["ingest_other_s"] = out["ingest_s"] - sum(spent.values())
out.update(files=s.files, files_skipped=s.files_skipped, requests_added=s.requests_added,
           unrecognized=s.unknown_records.get("file:unrecognized", 0))
print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
"""


def _ingest_phases(tree: Path, db: Path, fresh: bool) -> dict:
    """In-process phases of an ingest (first into a fresh warehouse, or a repeat on a kept one):
    imports, warehouse open, walk, sniff, parse, merge, ledger of files read, close."""
    if fresh:
        db.unlink(missing_ok=True)
    fmt = INGEST_FORMAT[1] if INGEST_FORMAT else ""
    _, _, out = _run([sys.executable, "-P", "-c", _PHASES_SCRIPT, str(db), str(tree / "projects"), fmt], env=KV_ENV)
    return json.loads(out)


def _whitespace_variant(work: Path, home: Path, have_ccusage: bool) -> dict:
    """A small tree re-written with spaces after ':' and ',': both tools' totals against the truth."""
    root = work / "spaced"
    truth = generate(root, 2 << 20, seed=SEED + 1)
    for f in (root / "projects").rglob("*.jsonl"):
        lines = f.read_bytes().splitlines()
        f.write_text(
            "".join(json.dumps(json.loads(x), separators=(", ", ": "), ensure_ascii=False) + "\n" for x in lines)
        )
    want = _truth_days(truth)
    db = work / "spaced.duckdb"
    _, report, _, _ = _kvtrace_pair(root, db)
    out = {
        "responses": truth["totals"]["responses"],
        "kvtrace": _compare(_kvtrace_days(report), want) | {"requests": report["requests"]},
    }
    if have_ccusage:
        _, doc, _ = _ccusage(root, home)
        out["ccusage"] = _compare(_ccusage_days(doc), want)
    return out


# -- main ----------------------------------------------------------------------------------------


def _torn_line_run(tree: Path, truth: dict, reps: int, home: Path, work: Path, have_ccusage: bool) -> dict:
    """The first run on a tree read while a session starts: one more session file holds its
    queue-operation lines and the prompt cut inside a character (the first two of the three
    bytes of a "—"), as a reader can find it mid-write. The file is removed afterwards."""
    target = next((tree / "projects").iterdir()) / "00000000-0000-4000-8000-000000000000.jsonl"
    sid, ts = target.name.split(".")[0], "2026-07-30T12:00:00.000Z"
    target.write_bytes(
        b'{"type":"queue-operation","operation":"enqueue","timestamp":"%s","sessionId":"%s","content":"and \xe2\x80\x94 more"}\n'
        b'{"type":"queue-operation","operation":"dequeue","timestamp":"%s","sessionId":"%s"}\n'
        b'{"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":"and \xe2\x80'
        % (ts.encode(), sid.encode(), ts.encode(), sid.encode())
    )
    kv, kv_cpu, cc, cc_cpu = [], [], [], []
    want = _truth_days(truth)
    db = work / "torn.duckdb"
    try:
        for i in range(reps + 1):
            db.unlink(missing_ok=True)
            cpu: list = []
            wall, report, _, _ = _kvtrace_pair(tree, db, cpu)
            if i:
                kv.append(wall)
                kv_cpu += cpu
            if have_ccusage:
                cpu = []
                cc_wall, cc_doc, _ = _ccusage(tree, home, cpu)
                if i:
                    cc.append(cc_wall)
                    cc_cpu += cpu
    finally:
        target.unlink()
    out = {
        "file": str(target.relative_to(tree)),
        "kvtrace_ingest_plus_report": _stats(kv),
        "kvtrace_cpu_s_median": round(statistics.median(kv_cpu), 3),
        "totals_kvtrace": _compare(_kvtrace_days(report), want),
    }
    if have_ccusage:
        out |= {
            "ccusage_daily": _stats(cc),
            "ccusage_cpu_s_median": round(statistics.median(cc_cpu), 3),
            "ratio_kvtrace_over_ccusage_median": round(statistics.median(kv) / statistics.median(cc), 2),
            "totals_ccusage": _compare(_ccusage_days(cc_doc), want),
        }
    return out


def _all_files(tree: Path) -> set[Path]:
    return {p for p in (tree / "projects").rglob("*") if p.is_file()}


def _remove_orphans(tree: Path, truth_file: Path) -> int:
    """Delete subagent sidecars (``agent-*.meta.json``) that an earlier run added and left without
    their transcript (only ``*.jsonl`` used to be cleaned up); returns how many."""
    since = truth_file.stat().st_mtime
    orphans = [
        p
        for p in (tree / "projects").rglob("agent-*.meta.json")
        if p.stat().st_mtime > since and not p.with_name(p.name[: -len(".meta.json")] + ".jsonl").exists()
    ]
    for p in orphans:
        p.unlink()
    return len(orphans)


def _compile_bytecode() -> str:
    """Byte-compile the kvtrace the commands import (``KV_ROOT``), as pip does when it installs
    the package. A checkout run with PYTHONDONTWRITEBYTECODE set (this sandbox sets it) would
    otherwise compile the launcher's modules from source in every command (~4 ms of a served
    repeat)."""
    import compileall

    compileall.compile_dir(str(KV_ROOT / "kvtrace"), quiet=1)
    return f"compiled before timing, as an installed package has it: {KV_ROOT / 'kvtrace'}"


def _tree(mb: int, shape: str = "default") -> tuple[Path, dict]:
    root = DATA / f"transcripts-{shape}-{mb}mb-seed{SEED}-v{GENERATOR_VERSION}"
    truth_file = root / "truth.json"
    if truth_file.is_file():
        if n := _remove_orphans(root, truth_file):
            print(f"   removed {n} sidecar files left by an earlier run", file=sys.stderr)
        return root, json.loads(truth_file.read_text())
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    truth = generate(root, mb << 20, seed=SEED, shape=shape)
    print(f"   generated {truth['bytes'] / 1e6:.0f} MB in {time.perf_counter() - t:.1f}s: {root}", file=sys.stderr)
    return root, truth


def _first_runs(trees: dict[str, tuple[Path, dict]], reps: int, home: Path, work: Path, have_ccusage: bool) -> dict:
    """The first run on each tree: a fresh warehouse each time, one warm-up of each tool first;
    in each round every shape's kvtrace pair, then its ccusage run. Returns per shape its tree,
    figures and totals (and ``_report``, the last kvtrace report; its warehouse is kept as
    ``work/first-<shape>.duckdb``)."""
    walls: dict = {n: {"kv": [], "ingest": [], "cc": [], "kv_cpu": [], "cc_cpu": []} for n in trees}
    rss: dict = {n: {"kv": 0, "cc": 0} for n in trees}
    last: dict = {}
    for i in range(reps + 1):
        for name, (tree, _) in trees.items():
            w, r = walls[name], rss[name]
            db = work / f"first-{name}.duckdb"
            db.unlink(missing_ok=True)
            cpu_kv: list = []
            wall, report, t_ingest, peak = _kvtrace_pair(tree, db, cpu_kv)
            r["kv"] = max(r["kv"], peak or 0)
            cc_doc = None
            cpu_cc: list = []
            if have_ccusage:
                cc_wall, cc_doc, peak = _ccusage(tree, home, cpu_cc)
                r["cc"] = max(r["cc"], peak or 0)
            if i:
                w["kv"].append(wall)
                w["ingest"].append(t_ingest)
                w["kv_cpu"] += cpu_kv
                if have_ccusage:
                    w["cc"].append(cc_wall)
                    w["cc_cpu"] += cpu_cc
            last[name] = (report, cc_doc)
    out = {}
    for name, (tree, truth) in trees.items():
        w, r = walls[name], rss[name]
        want = _truth_days(truth)
        report, cc_doc = last[name]
        first = {
            "kvtrace_ingest_plus_report": _stats(w["kv"]),
            "kvtrace_ingest_only": _stats(w["ingest"]),
            "kvtrace_cpu_s_median": round(statistics.median(w["kv_cpu"]), 3),
            "kvtrace_ingest_phases_in_process": _ingest_phases(tree, work / "phases.duckdb", fresh=True),
            "kvtrace_peak_rss_mb": round(r["kv"] / 1024) if r["kv"] else None,
        }
        totals = {
            "truth": {k: sum(v[k] for v in want.values()) for k in KEYS} | {"responses": truth["totals"]["responses"]},
            "kvtrace": _compare(_kvtrace_days(report), want) | {"requests": report["requests"]},
        }
        if have_ccusage:
            first["ccusage_daily"] = _stats(w["cc"])
            first["ccusage_cpu_s_median"] = round(statistics.median(w["cc_cpu"]), 3)
            first["ccusage_peak_rss_mb"] = round(r["cc"] / 1024) if r["cc"] else None
            first["ratio_kvtrace_over_ccusage_median"] = round(
                statistics.median(w["kv"]) / statistics.median(w["cc"]), 2
            )
            first["ratio_kvtrace_over_ccusage_cpu"] = round(
                first["kvtrace_cpu_s_median"] / first["ccusage_cpu_s_median"], 2
            )
            totals["ccusage"] = _compare(_ccusage_days(cc_doc), want)
        out[name] = {
            "tree": {
                "path": str(tree.relative_to(REPO)),
                "bytes": truth["bytes"],
                "files": truth.get("files"),
                "responses": truth["totals"]["responses"],
                "subagent_responses": truth["subagent_responses"],
            },
            "first_run": first,
            "totals": totals,
            "_report": report,
        }
    return out


def main() -> dict:
    quick = os.environ.get("KVTRACE_BENCH_QUICK") == "1"
    mb_env = os.environ.get("KVTRACE_BENCH_MB", "20" if quick else "")
    reps = int(os.environ.get("KVTRACE_BENCH_REPEATS", "2" if quick else "5"))
    shapes = os.environ.get("KVTRACE_BENCH_SHAPES", ",".join(SHAPE_MB)).split(",")
    unknown = [n for n in shapes if n not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown tree shape(s) {unknown}; known: {', '.join(SHAPES)}")
    trees = {name: _tree(int(mb_env) if mb_env else SHAPE_MB.get(name, 300), name) for name in shapes}
    tree, truth = trees[shapes[0]]  # the repeats run on the first shape's tree
    want = _truth_days(truth)
    have_ccusage = CCUSAGE.exists()
    result: dict = {
        "benchmark": "transcripts",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        },
        "repeats": reps,
        "ccusage": _ccusage_version() if have_ccusage else "not installed (make tools)",
        "kvtrace_bytecode": _compile_bytecode(),
    }
    added: list[Path] = []
    before_files = _all_files(tree)
    work = Path(tempfile.mkdtemp(prefix="kvtrace-bench-"))
    try:
        home = work / "home"
        home.mkdir()
        failure = _auto_detect_fails(tree, work)
        if failure:
            INGEST_FORMAT[:] = ["--input-format", "claude-transcript"]
        result["kvtrace_ingest_needs_format"] = failure
        result["shapes"] = _first_runs(trees, reps, home, work, have_ccusage)
        db = work / f"first-{shapes[0]}.duckdb"
        for v in result["shapes"].values():
            v.pop("_report")
        result["repeats_on_shape"] = shapes[0]
        for name, (t_tree, t_truth) in trees.items():
            result["shapes"][name]["first_run_torn_line"] = _torn_line_run(
                t_tree, t_truth, reps, home, work, have_ccusage
            )

        # -- repeat: the warehouse is kept; each round adds one new session file.
        rep_kv, rep_ingest, rep_cc = [], [], []
        extra: dict = {}
        for i in range(reps):
            path, t = add_session(tree, seed=10_000 + i, shape=shapes[0])
            extra.update(t)
            added.append(path)
            wall, report, t_ingest, _ = _kvtrace_pair(tree, db)
            rep_kv.append(wall)
            rep_ingest.append(t_ingest)
            if have_ccusage:
                cc_wall, cc_doc, _ = _ccusage(tree, home)
                rep_cc.append(cc_wall)
        want_now = _add_days(want, _truth_days(summarize(extra)))
        result["repeat_after_one_new_file"] = {
            "kvtrace_ingest_plus_report": _stats(rep_kv),
            "kvtrace_ingest_only": _stats(rep_ingest),
        }
        result["repeat_after_one_new_file"]["totals_kvtrace"] = _compare(_kvtrace_days(report), want_now)
        if have_ccusage:
            result["repeat_after_one_new_file"]["ccusage_daily"] = _stats(rep_cc)
            result["repeat_after_one_new_file"]["speedup_ccusage_over_kvtrace_median"] = round(
                statistics.median(rep_cc) / statistics.median(rep_kv), 2
            )
            result["repeat_after_one_new_file"]["totals_ccusage"] = _compare(_ccusage_days(cc_doc), want_now)

        # -- the repeat as one process, then through `kvtrace serve` (a resident process).
        served, extra_served = _served_repeat(tree, db, home, reps, 30_000, have_ccusage, work, added, shapes[0])
        served_report = served.pop("_report")
        want_now = _add_days(want_now, _truth_days(summarize(extra_served)))
        served["totals_vs_truth"] = _compare(_kvtrace_days(served_report), want_now)
        result["repeat_served"] = served

        result["whitespace_variant"] = _whitespace_variant(work, home, have_ccusage)

        # -- where the repeat's time goes.
        path, t = add_session(tree, seed=20_000, shape=shapes[0])
        added.append(path)
        phases = _ingest_phases(tree, db, fresh=False)
        py = min(_run([sys.executable, "-c", "pass"])[0] for _ in range(3))
        help_t = min(_run(KVTRACE + ["--help"])[0] for _ in range(3))
        result["startup"] = {
            "python_bare_s": round(py, 3),
            "kvtrace_help_s": round(help_t, 3),
            "repeat_ingest_phases_in_process": phases,
            "ingest_unchanged_tree": _importtime(
                ["ingest", str(tree / "projects"), "--db", str(db), "--quiet", *INGEST_FORMAT]
            ),
            "report_day_json": _importtime(["report", "--db", str(db), "--group-by", "day", "--format", "json"]),
        }
    finally:
        # Every file the run added: the new sessions' transcripts and their subagents' sidecars.
        for p in _all_files(tree) - before_files:
            p.unlink()
        for d in sorted((tree / "projects").rglob("*"), reverse=True):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        shutil.rmtree(work, ignore_errors=True)
    result["machine"]["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    _print(result)
    return result


def _add_days(a: dict[str, dict], b: dict[str, dict]) -> dict[str, dict]:
    out = {d: dict(v) for d, v in a.items()}
    for d, v in b.items():
        cur = out.setdefault(d, dict.fromkeys(KEYS, 0))
        for k in KEYS:
            cur[k] += v[k]
    return out


def _print(r: dict) -> None:
    rep = r["repeat_after_one_new_file"]
    line = lambda name, d: f"{name:<34}{d['median_s']:>7.3f}s median  {d['min_s']:>7.3f}s min"  # noqa: E731
    for name, sh in r["shapes"].items():
        t, f, tot = sh["tree"], sh["first_run"], sh["totals"]
        print(
            f"{name} tree: {t['bytes'] / 1e6:.0f} MB, {t['files']} files, {t['responses']} responses", file=sys.stderr
        )
        print("  first run", file=sys.stderr)
        print("    " + line("kvtrace ingest + report", f["kvtrace_ingest_plus_report"]), file=sys.stderr)
        if "ccusage_daily" in f:
            print("    " + line("ccusage daily --json --offline", f["ccusage_daily"]), file=sys.stderr)
            print(
                f"    kvtrace / ccusage: {f['ratio_kvtrace_over_ccusage_median']}x wall (median), "
                f"{f['ratio_kvtrace_over_ccusage_cpu']}x CPU",
                file=sys.stderr,
            )
        for tool in ("kvtrace", "ccusage"):
            if tool in tot:
                print(f"  totals {tool}: exact={tot[tool]['exact']} diff={tot[tool]['diff_vs_truth']}", file=sys.stderr)
        if "first_run_torn_line" in sh:
            tl = sh["first_run_torn_line"]
            print("  first run, one line torn inside a character", file=sys.stderr)
            print("    " + line("kvtrace ingest + report", tl["kvtrace_ingest_plus_report"]), file=sys.stderr)
            if "ccusage_daily" in tl:
                print("    " + line("ccusage daily --json --offline", tl["ccusage_daily"]), file=sys.stderr)
                print(
                    f"    kvtrace / ccusage: {tl['ratio_kvtrace_over_ccusage_median']}x wall (median); totals exact: "
                    f"kvtrace {tl['totals_kvtrace']['exact']}, ccusage {tl['totals_ccusage']['exact']}",
                    file=sys.stderr,
                )
    print(f"on the {r['repeats_on_shape']} tree:", file=sys.stderr)
    print("repeat after one new file", file=sys.stderr)
    print("  " + line("kvtrace ingest + report", rep["kvtrace_ingest_plus_report"]), file=sys.stderr)
    if "ccusage_daily" in rep:
        print("  " + line("ccusage daily --json --offline", rep["ccusage_daily"]), file=sys.stderr)
    if "repeat_served" in r:
        sv = r["repeat_served"]
        print("repeat after one new file, `kvtrace report --ingest` as one process", file=sys.stderr)
        print("  " + line("local (no server)", sv["kvtrace_report_ingest_one_process"]), file=sys.stderr)
        print("  " + line("through kvtrace serve", sv["kvtrace_served"]), file=sys.stderr)
        if "ccusage_daily_same_rounds" in sv:
            print("  " + line("ccusage (same rounds)", sv["ccusage_daily_same_rounds"]), file=sys.stderr)
            print(
                f"  ccusage / served: {sv['speedup_ccusage_over_served_median']}x (median), "
                f"{sv['speedup_ccusage_over_served_min']}x (min)",
                file=sys.stderr,
            )
        print(
            f"  served totals exact={sv['totals_vs_truth']['exact']}, "
            f"JSON same as a local run={sv['server']['json_same_as_local_run']}",
            file=sys.stderr,
        )
    for tool, v in r.get("whitespace_variant", {}).items():
        if isinstance(v, dict):
            print(f"spaced JSON, {tool}: exact={v['exact']} totals={v['totals']}", file=sys.stderr)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
