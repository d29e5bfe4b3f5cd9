"""The contract between format parsers and the ingest pipeline.

A parser is pure: it reads one input (a file path, or bytes for the collector) and returns a
``Parsed``: Arrow tables whose column names are those of the warehouse tables
(``requests``, ``metric_points``, ``block_requests``; missing columns become NULL / default),
plus the lines it rejected and the records it did not recognise, counted per kind. It never
touches the warehouse; the pipeline (``kvtrace.ingest.pipeline``) merges a ``Parsed`` into the
store in one transaction per file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Reject:
    """One input line that could not be read."""

    line: int | None
    reason: str
    field: str | None = None
    path: str | None = None  # set by batch parsers that read several files

    def describe(self, path: str | None = None) -> str:
        path = self.path or path or "<input>"
        where = f"{path}:{self.line}" if self.line is not None else path
        what = f"field '{self.field}': {self.reason}" if self.field else self.reason
        return f"{where}: {what}"


@dataclass
class Parsed:
    """What a parser made of one input."""

    requests: pa.Table | None = None
    metric_points: pa.Table | None = None
    block_requests: pa.Table | None = None
    rejects: list[Reject] = field(default_factory=list)
    unknown: Counter = field(default_factory=Counter)  # records seen but not used, per kind
    lines: int = 0  # input lines (or records) read
    warnings: list[str] = field(default_factory=list)  # e.g. a block size that was assumed
    # Parsers that can resume a grown file (Format.resumable): the byte offset just after the
    # last whole line read, the number of lines before it (both from the file's start), and the
    # fingerprint of the bytes before that offset (kvtrace.ingest.resume).
    read_to: int | None = None
    lines_read: int | None = None
    tail_sha256: str | None = None

    def tables(self) -> dict[str, pa.Table]:
        out = {}
        for name in ("requests", "metric_points", "block_requests"):
            t = getattr(self, name)
            if t is not None and t.num_rows:
                out[name] = t
        return out


# Canonical ``requests`` columns and the Arrow types parsers should produce.
REQUEST_SCHEMA = pa.schema(
    [
        ("request_key", pa.string()),
        ("request_id", pa.string()),
        ("message_id", pa.string()),
        ("ts", pa.timestamp("us")),
        ("source", pa.string()),
        ("agent", pa.string()),
        ("session_id", pa.string()),
        ("thread_id", pa.string()),
        ("user_id", pa.string()),
        ("org_id", pa.string()),
        ("project", pa.string()),
        ("model", pa.string()),
        ("query_source", pa.string()),
        ("input_tokens", pa.int64()),
        ("cache_read_tokens", pa.int64()),
        ("cache_write_5m_tokens", pa.int64()),
        ("cache_write_1h_tokens", pa.int64()),
        ("cache_write_unknown_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("duration_ms", pa.float64()),
        ("ttft_ms", pa.float64()),
        ("is_sidechain", pa.bool_()),
        ("attributes", pa.string()),
        ("ingested_from", pa.string()),
    ]
)

METRIC_POINT_SCHEMA = pa.schema(
    [
        ("point_key", pa.string()),
        ("metric", pa.string()),
        ("series_key", pa.string()),
        ("temporality", pa.int16()),
        ("start_ts", pa.timestamp("us")),
        ("ts", pa.timestamp("us")),
        ("value", pa.float64()),
        ("token_type", pa.string()),
        ("source", pa.string()),
        ("agent", pa.string()),
        ("session_id", pa.string()),
        ("user_id", pa.string()),
        ("org_id", pa.string()),
        ("model", pa.string()),
        ("query_source", pa.string()),
        ("attributes", pa.string()),
        ("ingested_from", pa.string()),
    ]
)

BLOCK_REQUEST_SCHEMA = pa.schema(
    [
        ("trace", pa.string()),
        ("seq", pa.int64()),
        ("ts", pa.timestamp("us")),
        ("input_length", pa.int64()),
        ("output_length", pa.int64()),
        ("block_size", pa.int32()),
        ("hash_ids", pa.list_(pa.int64())),
        ("chat_id", pa.string()),
        ("parent_chat_id", pa.string()),
        ("turn", pa.int32()),
        ("ingested_from", pa.string()),
    ]
)


def normalize_query_source(raw: Any) -> str | None:
    """Map a client's query source to main | subagent | auxiliary (raw value kept in attributes)."""
    if raw is None:
        return None
    s = str(raw)
    if s in ("main", "repl_main_thread", "sdk", "print") or s.startswith("repl_main"):
        return "main"
    if s == "subagent" or s.startswith("agent") or "subagent" in s or s.startswith("task"):
        return "subagent"
    return "auxiliary"


def query_source_sql(expr: str) -> str:
    """The SQL twin of :func:`normalize_query_source`, for parsers that work in DuckDB."""
    return (
        f"CASE WHEN {expr} IS NULL THEN NULL "
        f"WHEN {expr} IN ('main','sdk','print') OR starts_with({expr}, 'repl_main') THEN 'main' "
        f"WHEN {expr} = 'subagent' OR starts_with({expr}, 'agent') OR contains({expr}, 'subagent') "
        f"OR starts_with({expr}, 'task') THEN 'subagent' ELSE 'auxiliary' END"
    )


# Request and metric times outside these bounds are rejected at ingest: a clock or a file gone
# wrong, and a year beyond 9999 is one Python cannot even hold. (Block traces keep relative times
# from 1970 and are not checked.)
PLAUSIBLE_TIMES = ("1970-01-01", "2100-01-01")
_TIME_FIELD = {"claude-transcript": "timestamp", "codex-rollout": "timestamp", "gemini-chat": "timestamp"}


def reject_implausible_times(parsed: Parsed) -> None:
    """Move the ``requests`` and ``metric_points`` rows whose time is outside
    :data:`PLAUSIBLE_TIMES` to ``parsed.rejects``, each naming its file and line."""
    import numpy as np

    lo, hi = (np.datetime64(t, "us") for t in PLAUSIBLE_TIMES)
    for name in ("requests", "metric_points"):
        table = getattr(parsed, name)
        if table is None or not table.num_rows:
            continue
        bad = np.zeros(table.num_rows, dtype=bool)
        for col in ("ts", "start_ts"):
            if col in table.column_names:
                t = table.column(col).to_numpy()  # NaT for a missing time: never out of range
                bad |= (t < lo) | (t >= hi)
        if not bad.any():
            continue
        ts = table.column("ts").to_numpy()
        for i in np.flatnonzero(bad):
            where = table.column("ingested_from")[int(i)].as_py() or ""
            source = table.column("source")[int(i)].as_py()
            path, _, line = where.rpartition(":")
            parsed.rejects.append(
                Reject(
                    int(line) if line.isdigit() else None,
                    f"time {ts[i].astype('datetime64[s]')} is outside {PLAUSIBLE_TIMES[0]} .. {PLAUSIBLE_TIMES[1]}"
                    " (a clock or a file gone wrong?)",
                    field=_TIME_FIELD.get(source, "time"),
                    path=path if line.isdigit() else (where or None),
                )
            )
        setattr(parsed, name, table.filter(pa.array(~bad)))


def arrow_as(relation, schema: pa.Schema) -> pa.Table:
    """A DuckDB relation's columns of ``schema`` as an Arrow table of exactly that schema."""
    table = relation.project(", ".join(schema.names)).to_arrow_table()
    # cast() would import pyarrow.compute (50 ms) even when the types already match
    return table if table.schema.equals(schema) else table.cast(schema)
