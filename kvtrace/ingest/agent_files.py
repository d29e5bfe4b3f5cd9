"""Plumbing shared by the agent file parsers (Codex rollouts, Gemini chat logs).

Both read many small local files per batch and do the per-record work in DuckDB
(``queries/ingest/codex_rollout.sql``, ``queries/ingest/gemini_chats.sql``): Python only reads
the bytes (``.gz`` too) and hands DuckDB one row per file, ``(file_idx, path, content)``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from kvtrace.ingest.base import REQUEST_SCHEMA, Reject, arrow_as
from kvtrace.ingest.formats import damage_reason, read_whole


def read_files(paths: list[Path]) -> tuple[pa.Table, list[Reject]]:
    """The files of a batch as an Arrow table ``(file_idx, path, content)``.

    A file that cannot be read (vanished) is a ``Reject`` naming it, and the rest of the batch is
    still read; so is a damaged or truncated gzip file, whose whole lines before the damage are
    read. Bytes that are not UTF-8 become U+FFFD, so such a line fails
    its JSON parse and is reported by line instead of failing the whole file.
    """
    idx, names, texts, rejects = [], [], [], []
    for i, p in enumerate(paths):
        try:
            data, damage = read_whole(p)
        except OSError as e:
            rejects.append(Reject(None, f"cannot read: {e}", path=str(p)))
            continue
        if damage:  # the whole lines before it are read
            rejects.append(Reject(None, damage_reason(damage), path=str(p)))
        idx.append(i)
        names.append(str(p))
        texts.append(data.decode("utf-8", errors="replace"))
    table = pa.table(
        {
            "file_idx": pa.array(idx, pa.int32()),
            "path": pa.array(names, pa.string()),
            "content": pa.array(texts, pa.large_string()),
        }
    )
    return table, rejects


def connect():
    """A private in-memory DuckDB (the parsers never touch the warehouse)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


# A line whose kind is 'bad_count' names its field and value in columns bad_field, bad_value.
BAD_COUNT = ("not a token count (want a whole number from 0)", None)


def line_rejects(con, table: str, paths: list[Path], reasons: dict[str, tuple[str, str | None]]) -> list[Reject]:
    """A :class:`Reject` for every line of ``table`` whose ``kind`` is a key of ``reasons``
    (``kind -> (reason, field)``), in file and line order, naming its file; a ``bad_count``
    line names the field and value of its ``bad_field`` and ``bad_value`` columns."""
    kinds = ", ".join(f"'{k}'" for k in reasons)
    rows = con.execute(
        f"SELECT file_idx, lineno, kind, bad_field, bad_value FROM {table} WHERE kind IN ({kinds}) "
        "ORDER BY file_idx, lineno"
    ).fetchall()
    return [
        Reject(
            lineno,
            reasons[kind][0] + (f", got {value}" if kind == "bad_count" else ""),
            field=field if kind == "bad_count" else reasons[kind][1],
            path=str(paths[file_idx]),
        )
        for file_idx, lineno, kind, field, value in rows
    ]


def requests_table(con, table: str) -> pa.Table:
    """The parser's ``requests`` view as an Arrow table of :data:`REQUEST_SCHEMA`."""
    return arrow_as(con.table(table), REQUEST_SCHEMA)
