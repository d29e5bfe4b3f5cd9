"""``kvtrace query``: run a named query from ``queries/`` (or list them)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, guarded
from kvtrace.errors import ConfigError
from kvtrace.errors import UnknownQuery


def query(
    name: Annotated[Optional[str], typer.Argument(help="Query name (file stem under queries/).")] = None,
    param: Annotated[
        Optional[list[str]], typer.Option("--param", "-p", help="A $named parameter as key=value (repeatable).")
    ] = None,
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

        raise UnknownQuery(f"no query named '{name}'", hint="`kvtrace query --list` shows the named queries")
    q = load_query(name)
    params = {}
    for item in param or []:
        if "=" not in item:
            raise ConfigError(f"--param '{item}' is not key=value", hint="e.g. -p since=2026-11-01")
        k, v = item.split("=", 1)
        params[k] = None if v == "" else v
    import re

    if format not in ("table", "csv", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table, csv or json")
    names = sorted(set(re.findall(r"\$([A-Za-z_]\w*)", q.sql)))
    for k in params:
        if k not in names:
            raise ConfigError(
                f"query '{name}' has no parameter '{k}'",
                hint=f"its parameters: {', '.join(names)}" if names else "it takes no parameters",
            )
    for needed in set(names) - set(params):
        params[needed] = None  # an unset parameter is an open bound
    import duckdb

    with open_store(db, read_only=True) as store:
        try:
            df = store.to_polars(q.sql, params)
        except (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.BinderException) as e:
            bad = [k for k, v in params.items() if v is not None and v in str(e)]
            if not bad:
                raise
            raise ConfigError(
                f"--param {bad[0]}={params[bad[0]]!r} does not fit query '{name}': {str(e).splitlines()[0]}",
                hint="times are ISO dates or date-times in UTC, e.g. -p since=2026-11-01T09:00",
            ) from None
    if format == "csv":
        typer.echo(df.write_csv(), nl=False)
    elif format == "json":
        typer.echo(df.write_json())
    else:
        print_table(df, limit)


MAX_TEXT_WIDTH = 40


def print_table(df, limit: int) -> None:
    """A DataFrame as a terminal table: numbers right-aligned with thousands separators, empty
    cells for NULL, and a footer when rows are left out."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD)
    numeric = [dtype.is_numeric() for dtype in df.dtypes]
    for col, right in zip(df.columns, numeric):
        # one line per row, as wide as it needs (a long text cell ends in an ellipsis)
        table.add_column(
            col,
            justify="right" if right else "left",
            no_wrap=True,
            min_width=len(col),
            max_width=None if right else max(MAX_TEXT_WIDTH, len(col)),
            overflow="ellipsis",
        )
    for row in df.head(limit).iter_rows():
        table.add_row(*(_cell(v) for v in row))
    console = Console(width=Console(width=1 << 16).measure(table).maximum)
    console.print(table)
    if df.height > limit:
        console.print(f"{limit:,} of {df.height:,} rows (--limit N for more, --format csv for all)")
    elif df.height == 0:
        console.print("no rows")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.6g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v)


def register(app: typer.Typer) -> None:
    app.command("query")(guarded(query))
