"""Prefix-chain accuracy on the whole kv-cache-tester corpus (real Claude Code block hashes).

Every conversation of a kv-cache-tester clone (github.com/callanjfox/kv-cache-tester, a working
tree or a bare mirror) is turned into the telemetry a hosted API with a 5-minute cache would
report, kvtrace derives prefix chains from it (``head_tokens=0``), and the TTL what-if and working
sets are compared with those of the real hashes (``tests/kv_cache_tester.py`` says how).
Conversations whose file is absent (a partial mirror) are skipped and counted.

    KVTRACE_KV_CACHE_TESTER=/path/to/kv-cache-tester python -m bench chains

``KVTRACE_BENCH_QUICK=1`` takes the first 60 conversations. The figures are in
``docs/prefix-chains.md``.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from kvtrace.analyze.chains import ChainParams
from tests.kv_cache_tester import _requests, compare, read_conversation

QUICK = bool(os.environ.get("KVTRACE_BENCH_QUICK"))


def corpus(repo: Path) -> tuple[list[bytes], int]:
    """The bytes of every ``traces/*.json`` of a clone, and how many are absent."""
    if (repo / "traces").is_dir():
        files = sorted((repo / "traces").glob("trace_*.json"))
        return [f.read_bytes() for f in files], 0
    git = ["git", "-C", str(repo)]
    listing = subprocess.run(git + ["ls-tree", "HEAD", "traces/"], check=True, capture_output=True, text=True).stdout
    names = sorted(line.split("\t")[1] for line in listing.splitlines() if line.endswith(".json"))
    batch = subprocess.run(
        git + ["cat-file", "--batch"],
        input="".join(f"HEAD:{n}\n" for n in names).encode(),
        check=True,
        capture_output=True,
    ).stdout
    out, missing, at = [], 0, 0
    for _ in names:
        end = batch.index(b"\n", at)
        header = batch[at:end].split()
        at = end + 1
        if header[-1] == b"missing":
            missing += 1
            continue
        size = int(header[2])
        out.append(batch[at : at + size])
        at += size + 1
    return out, missing


def main() -> dict:
    repo = os.environ.get("KVTRACE_KV_CACHE_TESTER")
    if not repo:
        raise SystemExit("set KVTRACE_KV_CACHE_TESTER to a clone of github.com/callanjfox/kv-cache-tester")
    t0 = time.perf_counter()
    blobs, missing = corpus(Path(repo))
    if QUICK:
        blobs = blobs[:60]
    convs = [read_conversation(b) for b in blobs]
    n_req = sum(len(_requests(c)) for c in convs)
    t1 = time.perf_counter()
    result = compare(convs, ChainParams(head_tokens=0))
    return {
        "conversations": len(convs),
        "missing": missing,
        "requests": n_req,
        "read_s": round(t1 - t0, 2),
        "compare_s": round(time.perf_counter() - t1, 2),
        "ttl": {k: {a: (round(b, 6) if isinstance(b, float) else b) for a, b in v.items()} for k, v in result.items()},
    }


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
