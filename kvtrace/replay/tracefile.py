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
from kvtrace.analyze.load import assumed_block_size_note, read_block_trace
from kvtrace.errors import BadTraceInput

MOONCAKE_BLOCK_SIZE = 512


def read_trace(path: str | Path, block_size: int | None = None) -> BlockTrace:
    """A block trace from a Mooncake JSONL, an ``.npz``, or any block-hash format kvtrace ingests.

    The block size: the file's own (an ``.npz``'s ``block_size``, the ``block_size`` key that
    ``kvtrace export`` writes on every Mooncake line), else ``block_size``, else the format's
    (512 tokens for Mooncake); a ``block_size`` that contradicts the file is an error. When the
    size was assumed, ``meta["block_size_assumed"]`` says so (the replay reports it).
    """
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
        return _mooncake(data, path, block_size)
    return read_block_trace(path, block_size=block_size)


def _declared_block_size(data: bytes, path: Path, sizes: set, given: int | None) -> int | None:
    """The block size every line of a Mooncake file declares (None: no line does), checked
    against ``given``: lines that disagree, or a size that is not a positive integer, are errors."""
    import orjson

    if sizes == {None}:
        return None
    if len(sizes) > 1:
        want = None
        for no, line in enumerate(data.split(b"\n"), 1):
            if line.strip():
                v = orjson.loads(line).get("block_size")
                if want is None:
                    want = (v,)
                elif v != want[0]:
                    raise BadTraceInput(path, no, f"block size {'missing' if v is None else v} where the first "
                                        f"line says {'none' if want[0] is None else want[0]}",
                                        field="block_size", hint="one block size per trace: every line carries the same")
    (size,) = sizes
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise BadTraceInput(path, None, f"not a positive integer: {size!r}", field="block_size",
                            hint="block_size is the number of tokens per block, e.g. 64")
    if given is not None and given != size:
        raise BadTraceInput(path, None, f"the file says {size} tokens per block, --block-size says {given}",
                            field="block_size", hint="drop --block-size: the file's own size is used")
    return size


def _mooncake(data: bytes, path: Path, given: int | None) -> BlockTrace:
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
        sizes = {r.get("block_size") for r in rows}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        _first_problem(data, path)
        raise BadTraceInput(path, None, f"not a Mooncake trace ({e})",
                            hint="one JSON object per line with timestamp, input_length, hash_ids") from e
    declared = _declared_block_size(data, path, sizes, given)
    block_size = declared or given or MOONCAKE_BLOCK_SIZE
    if np.any(np.diff(t) < 0):                        # requests out of time order: sort them
        order = np.argsort(t, kind="stable")
        trace = BlockTrace.from_lists(t[order], inp[order], out[order], [lists[k] for k in order], block_size,
                                      name=_stem(path))
    else:
        trace = BlockTrace(t, inp, out, offsets, ids, block_size, name=_stem(path))
    if declared is None and given is None:
        trace.meta["block_size_assumed"] = assumed_block_size_note(path, block_size, "Mooncake")
    return trace


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
