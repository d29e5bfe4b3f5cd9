"""Reuse pipeline at scale: 10 M requests, as a block trace and as telemetry-derived chains.

Three measurements, each in a fresh process (so peak memory is that of the step alone, input
included, and start-up costs count):

1. ``block_trace``: a synthetic prefix-chained block trace of 10 M requests (sessions of growing
   conversations over a week, a shared head per model, Mooncake-like sizes: 512-token blocks,
   ~24 blocks per request) through the whole reuse pipeline: linking every block access
   (compiled pass), reuse profile, TTL what-if for 5 TTLs and the working set at each.
2. ``derived``: 10 M telemetry rows (read/write/input counts per request) -> prefix chains ->
   the same analyses from the chains' access runs, without writing block ids.
3. ``cli_mooncake``: ``kvtrace reuse`` on the Mooncake conversation trace, whole process.

``KVTRACE_BENCH_QUICK=1`` uses 200 k requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tests.paths import CONVERSATION

ROOT = Path(__file__).resolve().parents[1]
N = 200_000 if os.environ.get("KVTRACE_BENCH_QUICK") else 10_000_000
TTLS = [60.0, 300.0, 1800.0, 3600.0, None]


def _sessions(n: int, rng: np.random.Generator) -> dict:
    """Per-request session structure: session id, turn, time, prompt growth (vectorized)."""
    turns = np.clip(rng.lognormal(np.log(18), 0.6, size=n // 12), 1, 400).astype(np.int64)
    turns = turns[np.cumsum(turns) <= n]
    turns = np.append(turns, n - turns.sum()) if turns.sum() < n else turns
    turns = turns[turns > 0]
    s = len(turns)
    sess = np.repeat(np.arange(s), turns)
    start = np.sort(rng.uniform(0, 7 * 86400, size=s))
    first = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(turns, out=first[1:])
    turn = np.arange(n) - first[sess]
    gap = rng.lognormal(np.log(20), 1.2, size=n)
    gap[turn == 0] = 0
    t = start[sess] + (np.cumsum(gap) - np.repeat(np.cumsum(gap)[first[:-1]], turns))
    return {"sess": sess, "turn": turn, "t": t, "turns": turns}


def make_block_trace(n: int, seed: int = 0):
    """A Mooncake-like prefix-chained block trace of ``n`` requests (512-token blocks)."""
    from kvtrace.analyze._kernels import chain_ids
    from kvtrace.analyze.blocktrace import BlockTrace

    rng = np.random.default_rng(seed)
    s = _sessions(n, rng)
    B = 512
    grow = rng.integers(300, 1500, size=n)
    head = np.where(rng.random(len(s["turns"])) < 0.7, 4, 0)[s["sess"]]  # 4-block shared head
    base = np.cumsum(grow) - np.repeat(np.cumsum(grow)[np.concatenate(([0], np.cumsum(s["turns"])[:-1]))], s["turns"])
    prompt = head * B + 2000 + base
    prompt = np.minimum(prompt, 128_000)
    nb = -(-prompt // B)
    order_t = np.argsort(s["t"], kind="stable")  # time order of the requests
    pos = np.empty(n, dtype=np.int64)
    pos[order_t] = np.arange(n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nb[order_t], out=offsets[1:])
    chain_prev = np.where(s["turn"] > 0, pos[np.maximum(np.arange(n) - 1, 0)], -1)
    inherit = np.where(s["turn"] > 0, np.minimum(prompt[np.maximum(np.arange(n) - 1, 0)] // B, nb), 0)
    ids = np.empty(int(offsets[-1]), dtype=np.int64)
    # In time order: arrays indexed by the time position.
    g = lambda a: a[order_t]  # noqa: E731
    chain_ids(pos, offsets, g(chain_prev), g(head), np.zeros(n, np.int64), g(np.maximum(inherit, head)), ids)
    return BlockTrace(np.sort(s["t"]), g(prompt), rng.integers(20, 800, size=n)[order_t], offsets, ids, B)


def make_telemetry(n: int, seed: int = 1):
    """``chain_requests``-shaped rows for ``n`` requests of a Claude Code-like fleet."""
    import polars as pl

    rng = np.random.default_rng(seed)
    s = _sessions(n, rng)
    grow = rng.integers(300, 3500, size=n)
    base = np.cumsum(grow) - np.repeat(np.cumsum(grow)[np.concatenate(([0], np.cumsum(s["turns"])[:-1]))], s["turns"])
    cached = 16_842 + base % 60_000
    prev_t = np.where(s["turn"] > 0, s["t"][np.maximum(np.arange(n) - 1, 0)], -1e18)
    read = np.where((s["t"] - prev_t) <= 300, np.where(s["turn"] > 0, cached - grow, 0), 0)
    read = np.maximum(read, 0)
    return pl.DataFrame(
        {
            "request_key": np.arange(n).astype(str),
            "ts_us": (1.7e15 + s["t"] * 1e6).astype(np.int64),
            "org_id": "o",
            "session_id": s["sess"].astype(str),
            "thread_id": "main",
            "model": np.where(s["sess"] % 10 < 6, "claude-sonnet-4-6", "claude-opus-4-6"),
            "query_source": "main",
            "read_tokens": read,
            "write_tokens": cached - read,
            "write_5m_tokens": cached - read,
            "write_1h_tokens": np.zeros(n, np.int64),
            "input_tokens": rng.integers(1, 10, size=n),
            "output_tokens": rng.integers(40, 900, size=n),
            "is_compact_request": False,
            "after_compaction": False,
        }
    ).sort("ts_us", "request_key")


def _child(kind: str, path: str) -> dict:
    """Run one pipeline on a saved input; report time per step and this process's peak RSS."""
    import resource

    steps = {}
    t0, c0 = time.perf_counter(), time.process_time()
    if kind == "block_trace":
        from kvtrace.analyze.blocktrace import BlockTrace

        z = np.load(path)
        trace = BlockTrace(
            z["ts"], z["input_length"], z["output_length"], z["offsets"], z["hash_ids"], int(z["block_size"])
        )
        steps["load_s"] = time.perf_counter() - t0
        from kvtrace.analyze.access import access_runs

        t = time.perf_counter()
        n_runs = len(access_runs(trace))
        steps["link_blocks_s"] = time.perf_counter() - t
    else:
        import polars as pl

        from kvtrace.analyze.chains import ChainParams, derive_chains

        f = pl.read_parquet(path)
        steps["load_s"] = time.perf_counter() - t0
        t = time.perf_counter()
        trace = derive_chains(f, ChainParams(), materialize=False)
        steps["derive_chains_s"] = time.perf_counter() - t
        from kvtrace.analyze.access import run_chunks

        # a derived trace makes its runs a chunk at a time: count them so, not all at once (a
        # pass of its own, timed as one)
        t = time.perf_counter()
        n_runs = sum(len(c.runs) for c in run_chunks(trace))
        steps["count_runs_s"] = time.perf_counter() - t
    from kvtrace.analyze.reuse import reuse_profile
    from kvtrace.analyze.ttl import ttl_section

    t = time.perf_counter()
    prof = reuse_profile(trace)
    steps["reuse_profile_s"] = time.perf_counter() - t
    t = time.perf_counter()
    sec = ttl_section(trace, TTLS)
    steps["ttl_and_working_set_s"] = time.perf_counter() - t
    if kind == "derived":
        from kvtrace.analyze.spend import spend_whatif

        t = time.perf_counter()
        sp = spend_whatif(trace)
        steps["spend_s"] = time.perf_counter() - t
    return {
        "requests": trace.n_requests,
        "blocks": trace.n_blocks,
        "runs": n_runs,
        "steps_s": {k: round(v, 2) for k, v in steps.items()},
        "total_s": round(time.perf_counter() - t0, 2),
        # CPU time beside wall time: on a shared machine the wall time includes waiting.
        "total_cpu_s": round(time.process_time() - c0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "hit_ratio_tokens": {str(e["ttl_s"]): round(e["hit_ratio_tokens"], 4) for e in sec},
        "peak_working_set_tokens": {str(e["ttl_s"]): e["working_set"]["peak_tokens"] for e in sec},
        "reuse_within_5m": round(prof["reuse_time"]["within"]["5m"], 4),
        **({"spend_net_1h_minus_5m_usd": round(sp["net_difference_usd"], 2)} if kind == "derived" else {}),
    }


def _run_child(kind: str, path: str) -> dict:
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_reuse", "--child", kind, path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = round(time.perf_counter() - t, 2)
    return res


def main() -> dict:
    result: dict = {"requests": N, "ttls_s": TTLS}
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-") as tmp:
        t = time.perf_counter()
        bt = make_block_trace(N)
        result["generate_block_trace_s"] = round(time.perf_counter() - t, 2)
        p = Path(tmp) / "trace.npz"
        np.savez(
            p,
            ts=bt.ts,
            input_length=bt.input_length,
            output_length=bt.output_length,
            offsets=bt.offsets,
            hash_ids=bt.hash_ids,
            block_size=bt.block_size,
        )
        del bt
        result["block_trace"] = _run_child("block_trace", str(p))
        p.unlink()
        t = time.perf_counter()
        f = make_telemetry(N)
        result["generate_telemetry_s"] = round(time.perf_counter() - t, 2)
        p = Path(tmp) / "telemetry.parquet"
        f.write_parquet(p)
        del f
        result["derived"] = _run_child("derived", str(p))
    if CONVERSATION.exists():
        t = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtrace",
                "reuse",
                str(CONVERSATION),
                "--ttl",
                "1m,5m,1h,none",
                "--format",
                "json",
                "--out",
                os.devnull,
            ],
            cwd=ROOT,
            check=True,
            timeout=600,
        )
        result["cli_mooncake_conversation_wall_s"] = round(time.perf_counter() - t, 2)
    return result


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(main(), indent=2))
