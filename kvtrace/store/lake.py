"""The warehouse as a hive-partitioned Parquet lake (``TABLE/day=YYYY-MM-DD/*.parquet``).

A team that outgrows one machine points an existing distributed engine (Spark, Trino, DuckDB on
object storage) at the lake and runs the same portable SQL of ``queries/`` over it. The lake is
written to a temporary folder beside the target and renamed into place, so a reader never sees
half a lake.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

from kvtrace.errors import KvtraceError
from kvtrace.store.queries import load_query
from kvtrace.store.store import Store, sort_memory

# chain_requests: one row per request with what prefix-chain derivation reads (the rows
# ``kvtrace reuse`` reads from the warehouse, numbered in time order over the lake's window), for
# the Spark engine (``kvtrace.analyze.spark``).
TABLES = ("requests", "metric_points", "block_requests", "chain_requests")


def _table_sql(table: str) -> str:
    if table == "chain_requests":
        sql = load_query("chain_requests").sql
        # gidx: each row's place in time order, as kvtrace.analyze.load numbers a warehouse's rows
        return (
            "SELECT row_number() OVER (ORDER BY ts_us, tie) - 1 AS gidx, * EXCLUDE (tie), "
            f"CAST(CAST(make_timestamp(ts_us) AS DATE) AS VARCHAR) AS day FROM (\n{sql}\n)"
        )
    return load_query(f"lake_{table}").sql


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def export_lake(
    store: Store, out: str | Path, *, since: datetime | None = None, until: datetime | None = None, force: bool = False
) -> dict[str, int]:
    """Write each warehouse table with rows in the window to ``out/<table>/day=.../``.

    Args:
        store: the warehouse.
        out: the lake folder; it must not exist unless ``force`` (then it is replaced whole).
        since, until: the UTC window ``[since, until)``; None is open.
        force: replace an existing lake folder.

    Returns:
        Rows written per table (tables without rows in the window are left out of the lake).
    """
    out = Path(out)
    if out.exists() and not force:
        raise KvtraceError(f"{out} already exists", hint="choose a new folder, or pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    counts: dict[str, int] = {}
    try:
        params = {"since": since, "until": until}
        # sized by the rows of the tables (a cheap count), not of the window
        cap = sort_memory(store.scalar("SELECT (SELECT count(*) FROM requests) + (SELECT count(*) FROM metric_points)"))
        for table in TABLES:
            sql = _table_sql(table)
            # One pass, under the cap: COPY says how many rows it wrote (a separate count of the
            # chain rows ran their window over every row at DuckDB's default memory). A lake's
            # readers never depend on its rows' order (chain_requests carries gidx).
            with store.memory_capped(cap), store.unordered():
                n = store.scalar(
                    f"COPY ({sql}) TO {_literal(tmp / table)} (FORMAT PARQUET, PARTITION_BY (day), COMPRESSION ZSTD)",
                    params,
                )
            if not n:
                shutil.rmtree(tmp / table, ignore_errors=True)  # tables without rows are left out
                continue
            counts[table] = int(n)
        if out.exists():
            # a fresh name: a leftover of an interrupted replace must not block this one
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return counts
