"""Block-hash traces: Mooncake and Alibaba Bailian JSONL -> ``block_requests`` rows.

Both formats carry one request per line with ``input_length``, ``output_length`` and
``hash_ids``, the prefix-chained ids of the prompt's fixed-size token blocks:

- **Mooncake** (FAST'25): ``timestamp`` in milliseconds, relative; 512 tokens per block.
- **Bailian** (ATC'25): ``chat_id``, ``parent_chat_id`` (-1 for a root), ``timestamp`` in
  seconds, relative; ``turn``; ``type``; 16 tokens per block.

The block size: the file's own ``block_size`` key (``kvtrace export`` writes it on every line;
every line must then carry the same), else the one the caller gives (``--block-size``), else the
format's, with a warning that it was assumed. A given size that contradicts the file is an error.

Relative times are stored from 1970-01-01 UTC. ``seq`` is the request's position in the file,
so ingesting the same file twice adds nothing (``block_requests`` is keyed by trace and seq).

This is kvtrace's one block-trace reader: ``kvtrace ingest`` stores what it returns, and
``kvtrace replay`` / ``kvtrace reuse`` of a file turn it into a ``BlockTrace``
(``kvtrace.analyze.load.read_block_trace``). Its fast path parses the whole file with explicit
column types, by one of two engines the caller names (``engine``): ``"arrow"`` (Arrow's JSON
reader: no start-up, what a replay of a file uses) or ``"duckdb"`` (``read_json``: twice as fast
on large files, what the ingest uses, whose warehouse has DuckDB loaded already); both are
several times faster than ``orjson`` in a Python loop. Only a file with something wrong in it is
read again line by line, to reject exactly the bad lines with their line numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from kvtrace.errors import BadTraceInput
from kvtrace.ingest.base import BLOCK_REQUEST_SCHEMA, Parsed, Reject
from kvtrace.ingest.formats import damage_reason, read_whole

MOONCAKE_BLOCK_SIZE = 512
BAILIAN_BLOCK_SIZE = 16
FORMAT_BLOCK_SIZE = {"mooncake": MOONCAKE_BLOCK_SIZE, "bailian": BAILIAN_BLOCK_SIZE}

_TYPES = {
    "timestamp": pa.float64(),
    "input_length": pa.int64(),
    "output_length": pa.int64(),
    "hash_ids": pa.list_(pa.int64()),
    "block_size": pa.int64(),
    "chat_id": pa.string(),
    "parent_chat_id": pa.string(),
    "turn": pa.int64(),
}
_MOONCAKE_COLS = ("timestamp", "input_length", "output_length", "hash_ids", "block_size")
_BAILIAN_COLS = (*_MOONCAKE_COLS, "chat_id", "parent_chat_id", "turn")
_REQUIRED = ("timestamp", "input_length", "output_length", "hash_ids")
# Arrow parses a file in blocks of this many bytes (in parallel); a line must fit in one, so a
# longer line sends the file to the line-by-line path (still read exactly, only slower).
_ARROW_BLOCK = 16 << 20


def trace_name(path: str | Path) -> str:
    """The default trace name of a file: its name without ``.jsonl``/``.json``/``.gz`` suffixes."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".ndjson", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


def assumed_block_size_note(path: Path, size: int, fmt: str) -> str:
    """The warning of a block trace file read without a known block size."""
    return (
        f"{path.name}: no block size in the file; assumed {size} tokens per block ({fmt.capitalize()}'s). "
        f"Pass --block-size if it differs: every token and byte figure scales with it."
    )


def parse_mooncake(
    path: str | Path, *, trace: str | None = None, block_size: int | None = None, engine: str = "arrow"
) -> Parsed:
    """Read a Mooncake JSONL trace.

    Args:
        path: the file (``.gz`` allowed).
        trace: trace name stored with every row (default: the file name without suffixes).
        block_size: tokens per block of a file without a ``block_size`` key (default: 512, as in
            the FAST'25 traces, with a warning in ``Parsed.warnings``).
        engine: the fast path's parser, ``"arrow"`` or ``"duckdb"`` (the same rows either way).

    Raises:
        BadTraceInput: lines that disagree on their ``block_size``, or a ``block_size`` argument
            that contradicts the file's.
    """
    return _parse(Path(path), "mooncake", trace, block_size, 1_000, engine)


def parse_bailian(
    path: str | Path, *, trace: str | None = None, block_size: int | None = None, engine: str = "arrow"
) -> Parsed:
    """Read an Alibaba Bailian JSONL trace (``qwen_*_blksz_16.jsonl``).

    Args:
        path: the file (``.gz`` allowed).
        trace: trace name stored with every row (default: the file name without suffixes).
        block_size: tokens per block (default: 16, as in the published traces, with a warning).
        engine: as :func:`parse_mooncake`.

    Raises:
        BadTraceInput: as :func:`parse_mooncake`.
    """
    return _parse(Path(path), "bailian", trace, block_size, 1_000_000, engine)


PARSERS = {"mooncake": parse_mooncake, "bailian": parse_bailian}


# -- implementation ----------------------------------------------------------------------------


def _parse(path: Path, fmt: str, trace: str | None, given: int | None, unit_us: int, engine: str) -> Parsed:
    if engine not in ("arrow", "duckdb"):
        raise ValueError(f"engine {engine!r}: arrow or duckdb")
    trace = trace or trace_name(path)
    data, damage = read_whole(path)  # a damaged .gz: the whole lines before the damage
    lines = _nonblank_line_numbers(data)
    if engine == "arrow":
        table = _read_arrow(data, fmt)
    else:  # DuckDB reads the file itself: not past a .gz's damage
        table = None if damage else _read_duckdb(path, fmt)
    if table is None or table.num_rows != len(lines) or _has_problems(table):
        table, lines, rejects = _read_slow(data, fmt)
    else:
        rejects = []
    if damage:
        rejects.append(Reject(None, damage_reason(damage), path=str(path)))
    block_size, warnings = _block_size(table, lines, path, fmt, given)
    n_lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return Parsed(
        block_requests=_to_rows(table, lines, trace, block_size, unit_us, str(path)),
        rejects=rejects,
        lines=n_lines,
        warnings=warnings,
    )


def _block_size(t: pa.Table, lines: np.ndarray, path: Path, fmt: str, given: int | None) -> tuple[int, list[str]]:
    """The trace's block size and the warning when it was assumed (see the module's docstring)."""
    if given is not None and given <= 0:
        raise BadTraceInput(
            path,
            None,
            f"not a positive integer: {given}",
            field="block_size",
            hint="--block-size is the number of tokens per block, e.g. 64",
        )
    col = t.column("block_size").combine_chunks()
    if col.null_count == len(col):
        if given is not None:
            return given, []
        default = FORMAT_BLOCK_SIZE[fmt]
        return default, [assumed_block_size_note(path, default, fmt)] if len(col) else []
    first = col[0].as_py()
    differs = col.is_valid() if first is None else pc.fill_null(pc.not_equal(col, first), True)
    if pc.any(differs).as_py():
        i = pc.index(differs, True).as_py()
        v = col[i].as_py()
        raise BadTraceInput(
            path,
            int(lines[i]),
            f"block size {'missing' if v is None else v} where the first "
            f"line says {'none' if first is None else first}",
            field="block_size",
            hint="one block size per trace: every line carries the same",
        )
    if given is not None and given != first:
        raise BadTraceInput(
            path,
            None,
            f"the file says {first} tokens per block, --block-size says {given}",
            field="block_size",
            hint="drop --block-size: the file's own size is used",
        )
    return first, []


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
    starts = np.concatenate(([0], nl[: len(ends) - 1] + 1))
    keep = np.ones(len(ends), dtype=bool)
    for i in np.flatnonzero(ends - starts <= 8):
        keep[i] = bool(data[starts[i] : ends[i]].strip())
    return np.flatnonzero(keep).astype(np.int64) + 1


def _read_arrow(data: bytes, fmt: str) -> pa.Table | None:
    """The whole file by Arrow's JSON reader, or None if anything in it does not parse as the
    column types say (a wrong type, a line that is not an object, a line over ``_ARROW_BLOCK``)."""
    cols = _BAILIAN_COLS if fmt == "bailian" else _MOONCAKE_COLS
    # Bailian chat ids are numbers in the published traces and text elsewhere: read as they come.
    typed = [c for c in cols if c not in ("chat_id", "parent_chat_id")]
    options = pa_json.ParseOptions(
        explicit_schema=pa.schema([(c, _TYPES[c]) for c in typed]),
        unexpected_field_behavior="infer" if fmt == "bailian" else "ignore",
    )
    try:
        t = pa_json.read_json(
            pa.BufferReader(data), parse_options=options, read_options=pa_json.ReadOptions(block_size=_ARROW_BLOCK)
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    out = {}
    for c in cols:
        if c not in t.column_names:
            out[c] = pa.nulls(t.num_rows, _TYPES[c])
        elif t.schema.field(c).type in (_TYPES[c], pa.int64(), pa.null()):
            out[c] = t.column(c).cast(_TYPES[c])
        else:
            return None  # e.g. fractional chat ids: the slow path writes them as Python does
    return pa.table(out)


_DUCKDB_TYPES = {
    "timestamp": "DOUBLE",
    "input_length": "BIGINT",
    "output_length": "BIGINT",
    "hash_ids": "BIGINT[]",
    "block_size": "BIGINT",
    "chat_id": "VARCHAR",
    "parent_chat_id": "VARCHAR",
    "turn": "BIGINT",
}


def _read_duckdb(path: Path, fmt: str) -> pa.Table | None:
    """The whole file by DuckDB's ``read_json``, or None if DuckDB fails outright."""
    import duckdb

    cols = _BAILIAN_COLS if fmt == "bailian" else _MOONCAKE_COLS
    spec = "{" + ", ".join(f"'{c}': '{_DUCKDB_TYPES[c]}'" for c in cols) + "}"
    con = duckdb.connect()
    try:
        # ignore_errors: a malformed line becomes a NULL row (found below), not an abort.
        return con.sql(
            f"SELECT * FROM read_json(?, format='newline_delimited', columns={spec}, "
            "ignore_errors=true, maximum_object_size=1073741824)",
            params=[str(path)],
        ).to_arrow_table()
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
    table = pa.table({k: pa.array(v, type=_TYPES[k]) for k, v in keep.items()})
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


def _to_rows(t: pa.Table, lines: np.ndarray, trace: str, block_size: int, unit_us: int, source: str) -> pa.Table:
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
        "block_size": pa.array(np.full(n, block_size, dtype=np.int32)),
        "hash_ids": t.column("hash_ids").combine_chunks().cast(pa.list_(pa.int64())),
        "chat_id": t.column("chat_id").combine_chunks() if "chat_id" in names else pa.nulls(n, pa.string()),
        "parent_chat_id": (
            t.column("parent_chat_id").combine_chunks() if "parent_chat_id" in names else pa.nulls(n, pa.string())
        ),
        "turn": (t.column("turn").combine_chunks().cast(pa.int32()) if "turn" in names else pa.nulls(n, pa.int32())),
        "ingested_from": pc.binary_join_element_wise(source, line_str, ":"),
    }
    return pa.table(cols, schema=BLOCK_REQUEST_SCHEMA)
