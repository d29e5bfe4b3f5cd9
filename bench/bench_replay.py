"""Replay at scale, and against libCacheSim, each measured as a whole process.

1. ``mooncake_grid``: ``kvtrace replay`` of the Mooncake conversation trace (288,500 block
   accesses) over the whole grid, 64 capacities (+ unlimited) x 8 TTLs, against one libCacheSim
   LRU ``process_trace`` at a single capacity on the same block accesses (objects of one block,
   touched tail first). Both are whole processes (interpreter start, imports, reading the trace),
   best of ``REPEATS`` runs, interleaved; wall and CPU time (the machine is shared). libCacheSim
   is timed twice: from the JSONL (it must be converted to its binary format first) and from a
   binary trace written beforehand; kvtrace also without the CLI framework's option parsing.
2. ``fleet``: a synthetic fleet trace of 10 M requests (sessions of growing conversations over a
   day, a shared 4-block head for 70% of sessions, Mooncake-like sizes: 512-token blocks, ~23
   blocks per request), saved as ``.npz``, then ``kvtrace replay fleet.npz`` with the default
   grid, the seed-testbed tiers, MiniMax-M2.7 FP8 and TTFT: wall time and peak RSS of that process.

libcachesim is GPL-3.0 and only a benchmark/test extra; without it part 1 reports kvtrace alone.
``KVTRACE_BENCH_QUICK=1`` uses 300 k fleet requests and 2 repeats.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import child

import numpy as np

from tests.paths import CONVERSATION

ROOT = Path(__file__).resolve().parents[1]
QUICK = bool(os.environ.get("KVTRACE_BENCH_QUICK"))
N_FLEET = 300_000 if QUICK else 10_000_000
REPEATS = 2 if QUICK else 5
TTLS = ["30s", "1m", "5m", "10m", "30m", "1h", "2h", "none"]
LCS_CAPACITY_BLOCKS = 3_000_000 // 512

# The libCacheSim side: read the JSONL, flatten block accesses (tail first, as the replay touches
# them), write libCacheSim's oracleGeneral binary, one LRU process_trace. argv: jsonl|bin path, out.
LCS_SCRIPT = r"""
import sys, numpy as np, libcachesim as lcs
src, binpath, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
if src.endswith((".jsonl", ".jsonl.gz")):
    import gzip, orjson
    ids = []
    for line in (gzip.open if src.endswith(".gz") else open)(src, "rb"):
        if line.strip():
            ids.extend(reversed(orjson.loads(line)["hash_ids"]))
    rec = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    rec["t"] = np.arange(len(ids))
    rec["id"] = ids
    rec["size"] = 1
    rec["next"] = -1
    rec.tofile(binpath)
reader = lcs.TraceReader(binpath, lcs.TraceType.ORACLE_GENERAL_TRACE)
miss = lcs.LRU(cache_size=cap).process_trace(reader)
print(miss)
"""


def _wall(cmd: list[str]) -> tuple[float, int, float]:
    """Wall time (s), peak RSS (MB) and CPU time (user + system, s) of one child process.

    CPU time is the steadier figure on a shared machine: wall time also counts waiting for a core.
    """
    c = child.run(cmd, cwd=ROOT)
    return c.wall_s, round(c.maxrss_mb), c.cpu_s


def mooncake_grid(tmp: Path) -> dict:
    kv = [
        sys.executable,
        "-m",
        "kvtrace",
        "replay",
        str(CONVERSATION),
        "--format",
        "json",
        "--out",
        str(tmp / "grid.json"),
    ] + [a for t in TTLS for a in ("--ttl", t)]
    # The same command function without the CLI framework's option parsing (typer 0.29 coerces
    # options through pydantic, ~0.17 s of CPU per invocation): what the replay itself costs.
    direct = [
        sys.executable,
        "-c",
        "from pathlib import Path; from kvtrace.cli.replay import replay; "
        f"replay(Path({str(CONVERSATION)!r}), ttl={TTLS!r}, format='json', out=Path({str(tmp / 'g2.json')!r}))",
    ]
    out: dict = {"trace": CONVERSATION.name, "block_accesses": 288_500, "grid_ttls": len(TTLS)}
    try:
        import libcachesim  # noqa: F401

        have_lcs = True
    except ImportError:
        have_lcs = False
    binpath = tmp / "conv.oracleGeneral"
    cmds = {"kvtrace": kv, "kvtrace_without_cli_parsing": direct}
    if have_lcs:
        cmds["libcachesim_from_jsonl"] = [
            sys.executable,
            "-c",
            LCS_SCRIPT,
            str(CONVERSATION),
            str(binpath),
            str(LCS_CAPACITY_BLOCKS),
        ]
        cmds["libcachesim_from_binary"] = [
            sys.executable,
            "-c",
            LCS_SCRIPT,
            str(binpath),
            str(binpath),
            str(LCS_CAPACITY_BLOCKS),
        ]
    for cmd in cmds.values():  # warm caches; writes the binary trace
        _wall(cmd)
    runs: dict = {k: [] for k in cmds}
    for _ in range(REPEATS):  # interleaved, best of REPEATS
        for k, cmd in cmds.items():
            runs[k].append(_wall(cmd))
    grid = json.loads((tmp / "grid.json").read_text())
    out.update(
        grid_capacities=len({g["capacity_tokens"] for g in grid["grid"]}),
        grid_points=len(grid["grid"]),
        engine=grid["engine"]["kernel"],
        libcachesim_capacity_blocks=LCS_CAPACITY_BLOCKS if have_lcs else None,
    )
    for k, rs in runs.items():
        out[k] = {"wall_s": round(min(r[0] for r in rs), 3), "cpu_s": round(min(r[2] for r in rs), 3)}
    if have_lcs:
        for k in ("kvtrace", "kvtrace_without_cli_parsing"):
            for ref in ("libcachesim_from_binary", "libcachesim_from_jsonl"):
                for m in ("wall_s", "cpu_s"):
                    out[f"ratio_{k}_vs_{ref}_{m[:-2]}"] = round(out[k][m] / out[ref][m], 3)
    return out


def make_fleet(
    n: int,
    seed: int = 0,
    span_s: float = 86400.0,
    turns_median: float = 16,
    gap_median_s: float = 20,
    head_share: float = 0.7,
    head_blocks: int = 4,
    ids_dtype=np.int64,
):
    """A prefix-chained fleet trace of ``n`` requests (see the module docstring; the keywords
    shape it: turns per session, seconds between turns, share of sessions with the shared head).

    ``ids_dtype=np.int32`` keeps the block ids narrow (a 100 M-request fleet has 2.3 G of them),
    and the trace keeps them so."""
    from kvtrace.analyze._kernels import chain_ids
    from kvtrace.analyze.blocktrace import BlockTrace

    rng = np.random.default_rng(seed)
    turns = np.clip(
        rng.lognormal(np.log(turns_median), 0.6, size=max(n // 8, int(2 * n / turns_median))), 1, 400
    ).astype(np.int64)
    turns = turns[np.cumsum(turns) <= n]
    if turns.sum() < n:
        turns = np.append(turns, n - turns.sum())
    s = len(turns)
    first = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(turns, out=first[1:])
    sess = np.repeat(np.arange(s), turns)
    turn = np.arange(n) - first[sess]
    gap = rng.lognormal(np.log(gap_median_s), 1.2, size=n)  # think + tool time between turns
    gap[turn == 0] = 0
    cg = np.cumsum(gap)
    t = rng.uniform(0, span_s, size=s)[sess] + cg - np.repeat(cg[first[:-1]], turns)
    B = 512
    grow = rng.integers(250, 1000, size=n)
    cgrow = np.cumsum(grow)
    head = np.where(rng.random(s) < head_share, head_blocks, 0)[sess]  # the shared system prompt + tools
    prompt = np.minimum(head * B + 2000 + cgrow - np.repeat(cgrow[first[:-1]], turns), 64_000)
    nb = -(-prompt // B)
    order = np.argsort(t, kind="stable")
    del cg, gap, grow, cgrow
    ts, sess_o, prompt_o = t[order], sess[order], prompt[order]  # in time order
    del t, sess
    output = rng.integers(20, 800, size=n)[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nb[order], out=offsets[1:])
    prev = np.maximum(np.arange(n) - 1, 0)
    chain_prev = np.where(turn > 0, pos[prev], -1)[order]
    inherit = np.maximum(np.where(turn > 0, np.minimum(prompt[prev] // B, nb), 0), head)[order]
    head = head[order]
    del prev, turn, nb, prompt, order  # held at once below: ~80 B a request, and the ids
    ids = np.empty(int(offsets[-1]), dtype=ids_dtype)
    chain_ids(pos, offsets, chain_prev, head, np.zeros(n, np.int64), inherit, ids)
    del chain_prev, head, inherit, pos
    return BlockTrace(ts, prompt_o, output, offsets, ids, B, session=sess_o, name=f"fleet-{n}")


def _save_fleet(n: int, path: str) -> dict:
    from kvtrace.replay.tracefile import save_npz

    t = time.perf_counter()
    trace = make_fleet(n)
    info = {
        "requests": trace.n_requests,
        "block_accesses": trace.n_blocks,
        "blocks_per_request": round(trace.n_blocks / trace.n_requests, 2),
        "span_h": round(float(trace.ts[-1] - trace.ts[0]) / 3600, 2),
        "generate_s": round(time.perf_counter() - t, 1),
    }
    save_npz(trace, path)
    return info


def fleet(tmp: Path) -> dict:
    # Generated in a child process: a forked child starts with its parent's resident pages, and
    # ru_maxrss would charge a large parent to the replay measured next.
    path = tmp / "fleet.npz"
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_replay", "--make-fleet", str(N_FLEET), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    info = json.loads(out.stdout.strip().splitlines()[-1])
    cmd = [
        sys.executable,
        "-m",
        "kvtrace",
        "replay",
        str(path),
        "--tiers",
        "seed-testbed",
        "--model",
        "MiniMax-M2.7",
        "--kv-dtype",
        "fp8",
        "--format",
        "json",
        "--out",
        str(tmp / "fleet.json"),
    ]
    cold = _wall(cmd)
    warm = _wall(cmd)
    res = json.loads((tmp / "fleet.json").read_text())
    info.update(
        first_run_wall_s=round(cold[0], 1),
        wall_s=round(warm[0], 1),
        cpu_s=round(warm[2], 1),
        peak_rss_mb=warm[1],
        engine=res["engine"],
        grid_points=len(res["grid"]),
        hit_ratio_tokens_unlimited_no_ttl=round(res["grid"][-1]["hit_ratio_tokens"], 4),
        tiers={
            t["name"]: {
                "hit_ratio_tokens": round(t["hit_ratio_tokens"], 4),
                "fills_at": t["fills_at"],
                "write_GBps_mean": round((t["write_bytes_per_s_mean"] or 0) / 1e9, 2),
                "dwpd_per_drive": t.get("dwpd_per_drive"),
            }
            for t in res["tiers"]
        },
    )
    return info


def main() -> dict:
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-replay-") as tmp:
        out = {"quick": QUICK}
        if CONVERSATION.exists():
            out["mooncake_grid"] = mooncake_grid(Path(tmp))
        out["fleet"] = fleet(Path(tmp))
    return out


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--make-fleet":
        print(json.dumps(_save_fleet(int(sys.argv[2]), sys.argv[3])))
    else:
        print(json.dumps(main(), indent=2))
