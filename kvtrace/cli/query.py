"""``kvtrace query``: run a named query from ``queries/`` (or list them)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, guarded
from kvtrace.errors import ConfigError


def query(
    name: Annotated[Optional[str], typer.Argument(help="Query name (file stem under queries/).")] = None,
    param: Annotated[Optional[list[str]], typer.Option("--param", "-p", help="A $named parameter as key=value (repeatable).")] = None,
    db: DbOpt = None,
    list_: Annotated[bool, typer.Option("--list", help="List the named queries with their titles.")] = False,
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many rows in a table.")] = 50,
) -> None:
    """Run one of kvtrace's named SQL queries against the warehouse.

    Example: kvtrace query usage_window -p since=2026-11-01 -p until=2026-11-08 --format csv
    """
    from kvtrace.store import open_store, list_queries, load_query

    if list_ or name is None:
        for q in list_queries():
            typer.echo(f"{q.name:28} {q.title}")
        return
    if "/" in name or "\\" in name:
        # the parser's and the migrations' SQL (ingest/..., schema/...) is not for running by hand
        from kvtrace.errors import UnknownQuery

        raise UnknownQuery(f"no query named '{name}'", hint="`kvtrace query --list` shows the named queries")
    q = load_query(name)
    params = {}
    for item in param or []:
        if "=" not in item:
            raise ConfigError(f"--param '{item}' is not key=value", hint="e.g. -p since=2026-11-01")
        k, v = item.split("=", 1)
        params[k] = None if v == "" else v
    import re

    for needed in set(re.findall(r"\$([A-Za-z_]\w*)", q.sql)) - set(params):
        params[needed] = None  # an unset parameter is an open bound
    with open_store(db, read_only=True) as store:
        df = store.to_polars(q.sql, params)
    if format == "csv":
        typer.echo(df.write_csv(), nl=False)
    elif format == "json":
        typer.echo(df.write_json())
    elif format == "table":
        import polars as pl

        with pl.Config(tbl_rows=limit, tbl_cols=-1, tbl_width_chars=200):
            typer.echo(df)
    else:
        raise ConfigError(f"unknown --format '{format}'", hint="choose table, csv or json")


def register(app: typer.Typer) -> None:
    app.command("query")(guarded(query))
