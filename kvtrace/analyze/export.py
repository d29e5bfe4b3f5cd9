"""Write a block trace as Mooncake JSONL, the input of NVIDIA Dynamo's replay and AIPerf.

One compact JSON object per request, in time order:
``{"timestamp": <ms, integer>, "input_length": ..., "output_length": ..., "hash_ids": [...],
"block_size": <tokens per block>}``. Timestamps count from the first request (replayers schedule
from the first line), unless ``absolute`` keeps milliseconds since the epoch. ``block_size`` is
kvtrace's own key: ``kvtrace replay`` and ``kvtrace ingest`` read it back, and other readers skip
it (AIPerf's trace model and Dynamo's mooncake replay read the four Mooncake keys by name), but
they must still be told the block size (512 for Mooncake's own traces; derived traces default to
64): ``--block-size`` in AIPerf's ``analyze-trace``, ``block_size`` in Dynamo's mooncake replay.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.errors import ConfigError


def mooncake_table(trace: BlockTrace, absolute: bool = False) -> pa.Table:
    """The trace as an Arrow table with the four Mooncake columns and ``block_size``."""
    from kvtrace.analyze.access import ts_us

    if trace.meta.get("materialized") is False:
        from kvtrace.analyze.chains import materialize_ids

        materialize_ids(trace)
    t = ts_us(trace)
    base = 0 if absolute or not len(t) else int(t[0])
    ms = (t - base) // 1000
    hash_ids = pa.ListArray.from_arrays(pa.array(trace.offsets), pa.array(trace.hash_ids))
    return pa.table(
        {
            "timestamp": pa.array(ms, pa.int64()),
            "input_length": pa.array(trace.input_length, pa.int64()),
            "output_length": pa.array(trace.output_length, pa.int64()),
            "hash_ids": hash_ids,
            "block_size": pa.array(np.full(len(ms), trace.block_size, dtype=np.int64)),
        }
    )


def write_mooncake(trace: BlockTrace, out: str | Path | IO[str] | None = None, absolute: bool = False) -> int:
    """Write Mooncake JSONL to a path, a text stream or stdout; returns the number of lines.

    Lines are rendered by DuckDB's ``to_json`` (no per-request Python loop), without spaces.
    """
    import duckdb

    table = mooncake_table(trace, absolute)
    con = duckdb.connect()
    try:
        con.register("mooncake_rows", table)
        rel = con.sql(
            "SELECT to_json(struct_pack(timestamp := timestamp, input_length := input_length, "
            "output_length := output_length, hash_ids := hash_ids, block_size := block_size)) AS line FROM mooncake_rows"
        )
        reader = rel.to_arrow_reader(1 << 16) if hasattr(rel, "to_arrow_reader") else rel.fetch_record_batch(1 << 16)
        if out is None or not isinstance(out, (str, Path)):
            return _write_lines(reader, out or sys.stdout)
        # Write beside the target and rename, so a failed export never leaves half a file.
        path = Path(out)
        tmp = path.with_name(f".{path.name}.partial")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                n = _write_lines(reader, fh)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return n
    finally:
        con.close()


def _write_lines(reader, fh) -> int:
    n = 0
    for batch in reader:
        lines = batch.column(0).to_pylist()
        if lines:
            fh.write("\n".join(lines))
            fh.write("\n")
            n += len(lines)
    return n


EXPORT_FORMATS = ("mooncake",)


def export_warehouse(
    store,
    out: str | Path | IO[str] | None,
    format: str = "mooncake",
    trace: str | None = None,
    since=None,
    until=None,
    params=None,
    absolute: bool = False,
) -> dict:
    """Export the warehouse's block trace (ingested, or derived from telemetry) to ``out``.

    Returns:
        ``{"requests", "blocks", "block_size", "trace"}`` of what was written.
    """
    from kvtrace.analyze.load import load_block_trace

    if format not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format '{format}'", hint="choose one of " + ", ".join(EXPORT_FORMATS))
    bt = load_block_trace(store, trace=trace, since=since, until=until, params=params)
    n = write_mooncake(bt, out, absolute=absolute)
    return {"requests": n, "blocks": bt.n_blocks, "block_size": bt.block_size, "trace": bt.name}
