"""``kvtrace lake``: the warehouse as a hive-partitioned Parquet lake."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvtrace.cli._options import DbOpt, SinceOpt, UntilOpt, guarded
from kvtrace.window import parse_instant


def lake(
    out: Annotated[Path, typer.Argument(help="Lake folder to write (TABLE/day=YYYY-MM-DD/*.parquet).")],
    db: DbOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing lake folder (atomically).")] = False,
) -> None:
    """Export the warehouse tables as Parquet partitioned by UTC day, for Spark and other engines.

    Example: kvtrace lake lake/ --since 2026-11-01 --until 2026-11-08 && spark.read.parquet("lake/requests")
    """
    from kvtrace.store import open_store
    from kvtrace.store.lake import export_lake

    with open_store(db, read_only=True) as store:
        last = store.named("usage_bounds").fetchall()[0][1]
        counts = export_lake(
            store, out, since=parse_instant(since, last), until=parse_instant(until, last), force=force
        )
    written = ", ".join(f"{n:,} {t}" for t, n in counts.items()) or "nothing (no rows in the window)"
    typer.echo(f"wrote {written} to {out}")


def register(app: typer.Typer) -> None:
    app.command("lake")(guarded(lake))
