"""Trace files for ``kvtrace replay FILE``: Mooncake JSONL read fast, ``.npz`` arrays, the rest
through the block-hash ingest (``kvtrace.analyze.load.read_block_trace``).

The Mooncake reader is a plain ``orjson`` loop: for the files replay is typically pointed at it
is several times faster than starting DuckDB, and a replay's whole-process time is what users
wait for. An ``.npz`` holds the ``BlockTrace`` arrays (``ts`` in seconds, ``input_length``,
``output_length``, ``offsets``, ``hash_ids``, optional ``session``, scalar ``block_size``): the
format for traces too large for JSON (see ``save_npz``).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.errors import BadTraceInput

MOONCAKE_BLOCK_SIZE = 512


def read_trace(path: str | Path, block_size: int | None = None) -> BlockTrace:
    """A block trace from a Mooncake JSONL, an ``.npz``, or any block-hash format kvtrace ingests."""
    path = Path(path)
    if not path.exists():
        raise BadTraceInput(path, None, "no such file", hint="give a Mooncake .jsonl trace, an .npz, or --db")
    if path.suffix == ".npz":
        return load_npz(path)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    first = next((ln for ln in data.split(b"\n", 64)[:64] if ln.strip()), b"")
    if b'"hash_ids"' in first and b'"chat_id"' not in first:
        return _mooncake(data, path, block_size or MOONCAKE_BLOCK_SIZE)
    from kvtrace.analyze.load import read_block_trace
    return read_block_trace(path, block_size=block_size)


def _mooncake(data: bytes, path: Path, block_size: int) -> BlockTrace:
    import itertools

    import orjson

    lines = [ln for ln in data.split(b"\n") if ln.strip()]
    try:                                              # the fast path: every line is well formed
        rows = [orjson.loads(ln) for ln in lines]
        t = np.array([r["timestamp"] for r in rows], dtype=np.float64) / 1000.0   # milliseconds
        inp = np.array([r["input_length"] for r in rows], dtype=np.int64)
        out = np.array([r.get("output_length", 0) for r in rows], dtype=np.int64)
        lists = [r["hash_ids"] for r in rows]
        lens = np.array([len(h) for h in lists], dtype=np.int64)
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        ids = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(offsets[-1]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        _first_problem(data, path)
        raise BadTraceInput(path, None, f"not a Mooncake trace ({e})",
                            hint="one JSON object per line with timestamp, input_length, hash_ids") from e
    if np.any(np.diff(t) < 0):                        # requests out of time order: sort them
        order = np.argsort(t, kind="stable")
        return BlockTrace.from_lists(t[order], inp[order], out[order], [lists[k] for k in order], block_size,
                                     name=_stem(path))
    return BlockTrace(t, inp, out, offsets, ids, block_size, name=_stem(path))


def _first_problem(data: bytes, path: Path) -> None:
    """Raise ``BadTraceInput`` for the first line that is not a Mooncake request."""
    import orjson

    for no, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            r = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise BadTraceInput(path, no, f"not JSON ({e})", hint="one JSON object per line") from e
        if not isinstance(r, dict):
            raise BadTraceInput(path, no, "not a JSON object", hint="one JSON object per line")
        for key in ("timestamp", "input_length", "hash_ids"):
            if key not in r:
                raise BadTraceInput(path, no, "missing", field=key,
                                    hint="Mooncake lines carry timestamp, input_length, output_length, hash_ids")
        for key in ("timestamp", "input_length", "output_length"):
            if key in r and (isinstance(r[key], bool) or not isinstance(r[key], (int, float))):
                raise BadTraceInput(path, no, f"not a number: {r[key]!r}", field=key,
                                    hint="timestamp and lengths are numbers")
        h = r["hash_ids"]
        if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
            raise BadTraceInput(path, no, "not a list of integers", field="hash_ids",
                                hint="hash_ids is a list of integer block ids")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".ndjson", ".json", ".npz"):
        name = name.removesuffix(suffix)
    return name or "trace"


def save_npz(trace: BlockTrace, path: str | Path) -> None:
    """Write a trace as ``.npz`` (ids as int32 when they fit, to halve the file)."""
    ids = trace.hash_ids
    if ids.size and ids.min() >= 0 and ids.max() < 2**31:
        ids = ids.astype(np.int32)
    arrays = dict(ts=trace.ts, input_length=trace.input_length, output_length=trace.output_length,
                  offsets=trace.offsets, hash_ids=ids, block_size=np.int64(trace.block_size))
    if trace.session is not None:
        arrays["session"] = trace.session
    np.savez(path, **arrays)


def load_npz(path: str | Path) -> BlockTrace:
    path = Path(path)
    try:
        z = np.load(path)
        kw = {k: z[k] for k in ("ts", "input_length", "output_length", "offsets", "hash_ids")}
        session = z["session"] if "session" in z.files else None
        bs = int(z["block_size"])
    except (OSError, ValueError, KeyError) as e:
        raise BadTraceInput(path, None, f"not a kvtrace .npz trace ({e})",
                            hint="it needs ts, input_length, output_length, offsets, hash_ids, block_size") from e
    ids = kw.pop("hash_ids")
    try:
        trace = BlockTrace(kw["ts"], kw["input_length"], kw["output_length"], kw["offsets"],
                           np.zeros(0, dtype=np.int64), bs, session=session, name=_stem(path))
    except ValueError as e:
        raise BadTraceInput(path, None, str(e), hint="offsets has one more entry than requests") from e
    if len(ids) != trace.n_blocks:
        raise BadTraceInput(path, None, f"{len(ids)} hash_ids for {trace.n_blocks} blocks in offsets",
                            field="hash_ids", hint="offsets[-1] must equal len(hash_ids)")
    # Ids stored as int32 stay int32 (BlockTrace would widen them to int64): a 10 M-request
    # trace's ids are its largest array, and the replay engines take either width.
    trace.hash_ids = ids
    return trace
