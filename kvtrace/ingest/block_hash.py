"""Block-hash traces: Mooncake and Alibaba Bailian JSONL -> ``block_requests`` rows.

Both formats carry one request per line with ``input_length``, ``output_length`` and
``hash_ids``, the prefix-chained ids of the prompt's fixed-size token blocks:

- **Mooncake** (FAST'25): ``timestamp`` in milliseconds, relative; 512 tokens per block, unless
  a line says otherwise in a ``block_size`` key (as ``kvtrace export`` writes it).
- **Bailian** (ATC'25): ``chat_id``, ``parent_chat_id`` (-1 for a root), ``timestamp`` in
  seconds, relative; ``turn``; ``type``; 16 tokens per block.

Relative times are stored from 1970-01-01 UTC. ``seq`` is the request's position in the file,
so ingesting the same file twice adds nothing (``block_requests`` is keyed by trace and seq).

The fast path reads a file with DuckDB's ``read_json`` and explicit column types (about ten
times faster than ``orjson`` in a Python loop); only a file with something wrong in it is read
again line by line, to reject exactly the bad lines with their line numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.ingest.base import BLOCK_REQUEST_SCHEMA, Parsed, Reject
from kvtrace.ingest.formats import damage_reason, read_whole

MOONCAKE_BLOCK_SIZE = 512
BAILIAN_BLOCK_SIZE = 16

_MOONCAKE_COLS = {"timestamp": "DOUBLE", "input_length": "BIGINT", "output_length": "BIGINT",
                  "hash_ids": "BIGINT[]", "block_size": "BIGINT"}
_BAILIAN_COLS = {**_MOONCAKE_COLS, "chat_id": "VARCHAR", "parent_chat_id": "VARCHAR", "turn": "BIGINT"}
_REQUIRED = ("timestamp", "input_length", "output_length", "hash_ids")


def sniff(obj: object) -> str | None:
    """The block-hash format of one parsed JSON line: ``"mooncake"``, ``"bailian"`` or None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("hash_ids"), list) or "input_length" not in obj:
        return None
    return "bailian" if "chat_id" in obj else "mooncake"


def trace_name(path: str | Path) -> str:
    """The default trace name of a file: its name without ``.jsonl``/``.json``/``.gz`` suffixes."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".ndjson", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


def parse_mooncake(path: str | Path, *, trace: str | None = None,
                   block_size: int = MOONCAKE_BLOCK_SIZE) -> Parsed:
    """Read a Mooncake JSONL trace.

    Args:
        path: the file (``.gz`` allowed).
        trace: trace name stored with every row (default: the file name without suffixes).
        block_size: tokens per block of lines without a ``block_size`` key (512 in the FAST'25
            traces); a line's own key wins.
    """
    return _parse(Path(path), "mooncake", trace, block_size, unit_us=1_000)


def parse_bailian(path: str | Path, *, trace: str | None = None,
                  block_size: int = BAILIAN_BLOCK_SIZE) -> Parsed:
    """Read an Alibaba Bailian JSONL trace (``qwen_*_blksz_16.jsonl``).

    Args:
        path: the file (``.gz`` allowed).
        trace: trace name stored with every row (default: the file name without suffixes).
        block_size: tokens per block (16 in the published traces).
    """
    return _parse(Path(path), "bailian", trace, block_size, unit_us=1_000_000)


# -- implementation ----------------------------------------------------------------------------

def _parse(path: Path, fmt: str, trace: str | None, block_size: int, unit_us: int) -> Parsed:
    trace = trace or trace_name(path)
    cols = _BAILIAN_COLS if fmt == "bailian" else _MOONCAKE_COLS
    data, damage = read_whole(path)
    lines = _nonblank_line_numbers(data)
    table = None if damage else _read_fast(path, cols)
    if table is None or table.num_rows != len(lines) or _has_problems(table):
        table, lines, rejects = _read_slow(data, fmt)
    else:
        rejects = []
    if damage:          # the whole lines before it are read
        rejects.append(Reject(None, damage_reason(damage), path=str(path)))
    n_lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return Parsed(block_requests=_to_rows(table, lines, trace, block_size, unit_us, str(path)),
                  rejects=rejects, lines=n_lines)


def _nonblank_line_numbers(data: bytes) -> np.ndarray:
    """1-based numbers of the lines that hold something (DuckDB skips blank lines).

    Only short lines can be blank in practice, so only those are inspected in Python; a long
    line of spaces would make the row count disagree and send the file to the slow path.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size == 0:
        return np.zeros(0, dtype=np.int64)
    nl = np.flatnonzero(buf == 10)
    ends = nl if buf[-1] == 10 else np.append(nl, buf.size)
    starts = np.concatenate(([0], nl[:len(ends) - 1] + 1))
    keep = np.ones(len(ends), dtype=bool)
    for i in np.flatnonzero(ends - starts <= 8):
        keep[i] = bool(data[starts[i]:ends[i]].strip())
    return np.flatnonzero(keep).astype(np.int64) + 1


def _read_fast(path: Path, cols: dict[str, str]) -> pa.Table | None:
    import duckdb

    spec = "{" + ", ".join(f"'{k}': '{v}'" for k, v in cols.items()) + "}"
    con = duckdb.connect()
    try:
        # ignore_errors: a malformed line becomes a NULL row (found below), not an abort.
        return con.sql(f"SELECT * FROM read_json(?, format='newline_delimited', columns={spec}, "
                       "ignore_errors=true, maximum_object_size=1073741824)",
                       params=[str(path)]).to_arrow_table()
    except duckdb.Error:
        return None
    finally:
        con.close()


def _has_problems(t: pa.Table) -> bool:
    for name in _REQUIRED:
        if t.column(name).null_count:
            return True
    ts = t.column("timestamp").to_numpy(zero_copy_only=False)
    if not np.isfinite(ts).all() or (ts < 0).any():
        return True
    for name in ("input_length", "output_length"):
        if pc.any(pc.less(t.column(name), 0)).as_py():
            return True
    if "block_size" in t.column_names and pc.any(pc.less_equal(t.column("block_size"), 0)).as_py():
        return True
    if pc.list_flatten(t.column("hash_ids")).null_count:
        return True
    return False


def _read_slow(data: bytes, fmt: str) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """Line by line with exact rejects: used only for files the fast path found faulty."""
    import orjson

    keep: dict[str, list] = {k: [] for k in (_BAILIAN_COLS if fmt == "bailian" else _MOONCAKE_COLS)}
    lines, rejects = [], []
    for no, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            rejects.append(Reject(no, f"not JSON ({e})"))
            continue
        row, bad = _check_row(obj, fmt)
        if bad:
            rejects.append(Reject(no, bad[1], field=bad[0]))
            continue
        lines.append(no)
        for k, v in row.items():
            keep[k].append(v)
    types = {"timestamp": pa.float64(), "input_length": pa.int64(), "output_length": pa.int64(),
             "hash_ids": pa.list_(pa.int64()), "chat_id": pa.string(), "parent_chat_id": pa.string(),
             "turn": pa.int64(), "block_size": pa.int64()}
    table = pa.table({k: pa.array(v, type=types[k]) for k, v in keep.items()})
    return table, np.asarray(lines, dtype=np.int64), rejects


def _number(v, integer: bool):
    """A JSON number or a numeric string (wire types vary); None if it is not one."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v) if not integer else int(v)
        except ValueError:
            try:
                v = float(v)
            except ValueError:
                return None
    if isinstance(v, float):
        if not math.isfinite(v) or (integer and v != int(v)):
            return None
        return int(v) if integer else v
    if isinstance(v, int):
        return v
    return None


def _check_row(obj, fmt: str) -> tuple[dict, tuple[str | None, str] | None]:
    if not isinstance(obj, dict):
        return {}, (None, "not a JSON object")
    row: dict = {}
    for name, integer in (("timestamp", False), ("input_length", True), ("output_length", True)):
        if name not in obj:
            return {}, (name, "missing")
        v = _number(obj[name], integer)
        if v is None or v < 0:
            return {}, (name, f"not a non-negative {'integer' if integer else 'number'}: {obj[name]!r}")
        row[name] = v
    ids = obj.get("hash_ids")
    if not isinstance(ids, list):
        return {}, ("hash_ids", "missing or not a list")
    if not all(isinstance(x, int) and not isinstance(x, bool) and -(2**63) <= x < 2**63 for x in ids):
        return {}, ("hash_ids", "holds something other than 64-bit integers")
    row["hash_ids"] = ids
    if "block_size" in obj:
        v = _number(obj["block_size"], True)
        if v is None or v <= 0:
            return {}, ("block_size", f"not a positive integer: {obj['block_size']!r}")
        row["block_size"] = v
    else:
        row["block_size"] = None
    if fmt == "bailian":
        row["chat_id"] = None if obj.get("chat_id") is None else str(obj["chat_id"])
        row["parent_chat_id"] = None if obj.get("parent_chat_id") is None else str(obj["parent_chat_id"])
        row["turn"] = _number(obj.get("turn"), True)
    return row, None


def _to_rows(t: pa.Table, lines: np.ndarray, trace: str, block_size: int, unit_us: int,
             source: str) -> pa.Table:
    n = t.num_rows
    ts_us = np.rint(t.column("timestamp").to_numpy(zero_copy_only=False) * unit_us).astype(np.int64)
    names = {f.name for f in t.schema}
    line_str = pc.cast(pa.array(lines), pa.string())
    cols = {
        "trace": pa.array(np.full(n, trace, dtype=object), type=pa.string()),
        "seq": pa.array(np.arange(n, dtype=np.int64)),
        "ts": pa.array(ts_us, type=pa.timestamp("us")),
        "input_length": t.column("input_length").combine_chunks().cast(pa.int64()),
        "output_length": t.column("output_length").combine_chunks().cast(pa.int64()),
        "block_size": (pc.fill_null(t.column("block_size").combine_chunks(), block_size).cast(pa.int32())
                       if "block_size" in names else pa.array(np.full(n, block_size, dtype=np.int32))),
        "hash_ids": t.column("hash_ids").combine_chunks().cast(pa.list_(pa.int64())),
        "chat_id": t.column("chat_id").combine_chunks() if "chat_id" in names else pa.nulls(n, pa.string()),
        "parent_chat_id": (t.column("parent_chat_id").combine_chunks() if "parent_chat_id" in names
                           else pa.nulls(n, pa.string())),
        "turn": (t.column("turn").combine_chunks().cast(pa.int32()) if "turn" in names
                 else pa.nulls(n, pa.int32())),
        "ingested_from": pc.binary_join_element_wise(source, line_str, ":"),
    }
    return pa.table(cols, schema=BLOCK_REQUEST_SCHEMA)
