"""kv-cache-tester conversations as hosted-API telemetry, and their real block hashes as ground truth.

The kv-cache-tester traces (github.com/callanjfox/kv-cache-tester, ``traces/*.json``) are real
Claude Code conversations with 64-token prefix-chained block hashes. They let the prefix chains
kvtrace derives from token counts be checked against what was really shared:

- :func:`otlp_lines` turns conversations into Claude Code ``api_request`` log events (OTLP JSON
  lines), the telemetry a hosted API with a prompt cache of ``api_ttl_s`` (5 min) would report:
  per request the cache read (:func:`api_reads`), a cache write of the rest of the prompt (all
  5 min), no uncached input, the output, the time ``t`` and the duration ``api_time``. Sub-agents
  are reported under their type's agent name (``general-purpose`` when the trace does not say), so
  parallel ones of one type share one thread id, as Claude Code's telemetry reports them.
- :func:`truth_trace` is the block trace of the real hashes.
- :func:`compare` ingests the telemetry into a warehouse, derives the chains, and sets the TTL
  what-if (token hit ratio) and working sets of both side by side.

Emulated cache (per conversation and model): a request reads its longest leading run of blocks
touched no longer than ``api_ttl_s`` ago; when that run ends exactly where an earlier, still cached
request's prompt ended (its full blocks; its partial last block is taken to match), the read is that
prompt's length to the token (the API's cache breakpoint at the end of each prompt), else the run's
whole blocks. Every block of the prompt is then touched. Conversations all start at ``BASE_NS``.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import numpy as np
import orjson

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.load import load_block_trace
from kvtrace.analyze.ttl import hit_ratios, request_hits
from kvtrace.analyze.working_set import working_set
from kvtrace.ingest import ingest
from kvtrace.store import Store

BLOCK = 64
BASE_NS = 1_790_000_000 * 10**9  # 2026-09-21T14:13:20Z, every conversation's t = 0
API_TTL_S = 300.0
TTLS = (60.0, 300.0, 3600.0, None)
AGENT_NAME = "general-purpose"


def read_conversation(source: str | Path | bytes) -> dict:
    """One conversation from a path (``.json`` or ``.json.gz``) or from its bytes."""
    data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return orjson.loads(data)


def _requests(conv: dict) -> list[dict]:
    """Requests in time order (ties in file order), each with its ``agent`` (None: main thread).

    Sub-agent requests come two ways: inline (type ``s``, no agent type) or nested in a
    ``subagent`` entry (with its ``subagent_type``; their ``t`` counts from the entry's).
    """
    reqs = []
    for r in conv["requests"]:
        if r.get("type") == "subagent":
            if isinstance(r.get("requests"), list):
                reqs += [
                    {**q, "t": float(r["t"]) + float(q["t"]), "agent": r.get("subagent_type") or AGENT_NAME}
                    for q in r["requests"]
                ]
        else:
            reqs.append({**r, "agent": AGENT_NAME if r.get("type") == "s" else None})
    return [reqs[k] for k in sorted(range(len(reqs)), key=lambda k: (float(reqs[k]["t"]), k))]


def _dense_blocks(reqs: list[dict]) -> tuple[list[np.ndarray], int]:
    """Each request's full blocks as dense ids of the conversation, kept apart per model."""
    models = {m: k for k, m in enumerate(sorted({r["model"] for r in reqs}))}
    lens = [len(r["hash_ids"]) for r in reqs]
    keys = (
        np.concatenate([np.asarray(r["hash_ids"], dtype=np.int64) + (models[r["model"]] << 40) for r in reqs])
        if sum(lens)
        else np.zeros(0, np.int64)
    )
    uniq, dense = np.unique(keys, return_inverse=True)
    cuts = np.cumsum(lens)[:-1]
    return np.split(dense.astype(np.int64).ravel(), cuts), len(uniq)


def api_reads(conv: dict, api_ttl_s: float = API_TTL_S) -> list[int]:
    """Cache-read tokens per request (in :func:`_requests` order) as the hosted API reports them."""
    reqs = _requests(conv)
    B = int(conv.get("block_size", BLOCK))
    blocks, n_ids = _dense_blocks(reqs)
    last_use = np.full(n_ids, -np.inf)
    entries: dict[tuple, dict[int, float]] = {}  # (blocks, last block id) -> {prompt length: last use}
    out = []
    for r, ids in zip(reqs, blocks):
        t, n_in = float(r["t"]), int(r["in"])
        stale = np.flatnonzero(t - last_use[ids] > api_ttl_s)
        k = int(stale[0]) if len(stale) else len(ids)
        read = k * B
        if k:
            live = entries.get((k, int(ids[k - 1])), {})
            fits = [n for n, used in live.items() if n <= n_in and t - used <= api_ttl_s]
            if fits:
                read = max(fits)
                live[read] = t
        out.append(min(read, n_in))
        last_use[ids] = t
        if len(ids):
            entries.setdefault((len(ids), int(ids[-1])), {})[n_in] = t
    return out


def _attr(key: str, value) -> dict:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return {"key": key, "value": {"stringValue": str(value)}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": value}}
    return {"key": key, "value": {"doubleValue": value}}


def otlp_lines(convs: list[dict], api_ttl_s: float = API_TTL_S) -> list[bytes]:
    """One OTLP/JSON logs line per conversation: its requests as Claude Code ``api_request`` events."""
    lines = []
    for conv in convs:
        reqs, reads = _requests(conv), api_reads(conv, api_ttl_s)
        records = []
        for k, (r, read) in enumerate(zip(reqs, reads)):
            sub = r["agent"] is not None
            write = int(r["in"]) - read
            attrs = [
                ("event.name", "api_request"),
                ("session.id", conv["id"]),
                ("user.id", "kv-cache-tester"),
                ("organization.id", "kv-cache-tester"),
                ("model", r["model"]),
                ("request_id", f"req_{conv['id']}_{k:05d}"),
                ("query_source", "agent:custom" if sub else "repl_main_thread"),
                ("input_tokens", 0),
                ("output_tokens", int(r["out"])),
                ("cache_read_tokens", read),
                ("cache_creation_tokens", write),
                ("cache_creation_5m_tokens", write),
                ("cache_creation_1h_tokens", 0),
                ("duration_ms", int(round(float(r.get("api_time") or 0) * 1000))),
            ]
            if sub:
                attrs.append(("agent.name", r["agent"]))
            records.append(
                {
                    "timeUnixNano": str(BASE_NS + int(round(float(r["t"]) * 1e9))),
                    "body": {"stringValue": "claude_code.api_request"},
                    "attributes": [_attr(a, v) for a, v in attrs],
                }
            )
        lines.append(
            orjson.dumps(
                {
                    "resourceLogs": [
                        {
                            "resource": {"attributes": [_attr("service.name", "claude-code")]},
                            "scopeLogs": [
                                {"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": records}
                            ],
                        }
                    ]
                }
            )
        )
    return lines


def truth_trace(convs: list[dict]) -> BlockTrace:
    """The real hashes as one block trace, requests in the telemetry's order (:func:`otlp_lines`).

    Ids are kept apart per conversation and model (they are local to a conversation; a cache is
    per model). A prompt's partial last block, which the hashes leave out, gets an id of its own
    (a KV cache allocates it; it is never shared), so both traces count blocks alike.
    """
    ts, lens, outs, lists, sess = [], [], [], [], []
    base = 0
    for c, conv in enumerate(convs):
        reqs = _requests(conv)
        blocks, n_ids = _dense_blocks(reqs)
        for r, ids in zip(reqs, blocks):
            n_in = int(r["in"])
            if n_in > len(ids) * BLOCK:
                ids = np.append(ids, n_ids)
                n_ids += 1
            lists.append(ids + base)
            ts.append((BASE_NS + int(round(float(r["t"]) * 1e9))) // 1000)  # as the events say
            lens.append(n_in)
            outs.append(int(r["out"]))
            sess.append(c)
        base += n_ids
    # The telemetry's order: time (in µs), then request key (conversation id, then request).
    order = sorted(range(len(ts)), key=lambda k: (ts[k], convs[sess[k]]["id"], k))
    sizes = np.array([len(lists[k]) for k in order], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    ids = np.concatenate([lists[k] for k in order]) if len(order) else np.zeros(0, np.int64)
    return BlockTrace(
        np.array([ts[k] for k in order]) / 1e6,
        np.array([lens[k] for k in order]),
        np.array([outs[k] for k in order]),
        offsets,
        ids,
        BLOCK,
        session=np.array([sess[k] for k in order], dtype=np.int64),
        name="hashes",
    )


def derived_trace(convs: list[dict], params, api_ttl_s: float = API_TTL_S) -> BlockTrace:
    """The chains kvtrace derives from the conversations' telemetry, ingested into a warehouse."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kv-cache-tester.otlp.jsonl"
        with open(path, "wb") as f:
            for line in otlp_lines(convs, api_ttl_s):
                f.write(line + b"\n")
        with Store(memory=True) as store:
            ingest(store, [path])
            return load_block_trace(store, params=params, materialize=False)


def figures(trace: BlockTrace, ttls=TTLS) -> dict:
    """Token hit ratio, peak and mean working set per TTL."""
    out = {}
    for h in hit_ratios(trace, list(ttls)):
        ws = working_set(trace, h["ttl_s"], series_points=0)
        out[_label(h["ttl_s"])] = {"hit": h["hit_ratio_tokens"], "peak": ws["peak_tokens"], "mean": ws["mean_tokens"]}
    return out


def compare(convs: list[dict], params, api_ttl_s: float = API_TTL_S, ttls=TTLS) -> dict:
    """Per TTL: hit ratios (truth, derived, difference in percentage points, and that difference
    split into the requests that hit more and those that hit less) and working sets (truth,
    derived, derived / truth - 1). Both traces list the requests in the same order."""
    truth_tr, derived_tr = truth_trace(convs), derived_trace(convs, params, api_ttl_s)
    truth, derived = figures(truth_tr, ttls), figures(derived_tr, ttls)
    total = int(truth_tr.input_length.sum())
    out = {}
    for ttl, (label, t) in zip(ttls, truth.items()):
        d = derived[label]
        diff = request_hits(derived_tr, ttl)[1] - request_hits(truth_tr, ttl)[1]
        out[label] = {
            "hit_truth": t["hit"],
            "hit_derived": d["hit"],
            "pp": 100 * (d["hit"] - t["hit"]),
            "pp_over": 100 * int(diff[diff > 0].sum()) / total,
            "pp_under": 100 * int(diff[diff < 0].sum()) / total,
            "peak_truth": t["peak"],
            "peak_derived": d["peak"],
            "peak_err": d["peak"] / t["peak"] - 1 if t["peak"] else 0.0,
            "mean_truth": t["mean"],
            "mean_derived": d["mean"],
            "mean_err": d["mean"] / t["mean"] - 1 if t["mean"] else 0.0,
        }
    return out


def _label(ttl_s) -> str:
    if ttl_s is None:
        return "none"
    return f"{int(ttl_s // 3600)}h" if ttl_s >= 3600 else f"{int(ttl_s // 60)}m"
