"""``Store``: the embedded DuckDB warehouse (default ``./kvtrace.duckdb``, ``KVTRACE_DB`` or ``--db``)."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from kvtrace.errors import KvtraceError, SchemaError, WarehouseBusy, WriteFailed
from kvtrace.store.queries import load_query, queries_dir

DEFAULT_DB = "kvtrace.duckdb"
ROW_GROUP_ROWS = 122_880  # DuckDB's row group size: an insert of more is a bulk insert
# DuckDB's memory (see Store.memory_capped) while a query sorts every request (the chain rows by
# session, a lake's tables by day): beyond it, the sort spills to disk. The chain rows' sort holds
# it while the derivation fills its arrays of every request: at 10 M requests 384 MB loaded as
# fast as 512 MB with a peak 139 MiB lower; 256 MB took 4 s more.
SORT_MEMORY = 384 * 2**20
# DuckDB's memory while the token mix rolls requests up per hour and session: uncapped it held
# 6.9 GB at 100 M requests; capped here, 1.2 GB and 14 s more (at 10 M it stays under the cap).
ROLLUP_MEMORY = 2**30
# ... and per row sorted, for a sort of many rows: DuckDB's merge over every row needs pinned
# blocks in proportion to the rows (100 M chain rows failed at 384 MB, ran at 1 GB: 144 s).
SORT_BYTES_PER_ROW = 10
# DuckDB's own advice: at least this much memory per thread, or a spilling operator may still
# run out; a capped query runs on as many threads as its cap feeds.
MEMORY_PER_THREAD = 128 * 2**20
# What DuckDB's errors say when the warehouse file cannot be written.
_WRITE_FAILURES = (
    "could not write",
    "no space left",
    "file too large",
    "failed to commit",
    "database has been invalidated",
    "disk quota exceeded",
)


def sort_memory(rows: int) -> int:
    """DuckDB's memory cap for a query that sorts ``rows`` rows (see ``SORT_MEMORY``)."""
    return max(SORT_MEMORY, SORT_BYTES_PER_ROW * int(rows))


def _can_make_folder(path: str) -> bool:
    """Whether ``path`` is a folder this process may write in, or one it may create."""
    p = Path(path).absolute()
    if p.exists():
        return p.is_dir() and os.access(p, os.W_OK | os.X_OK)
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def default_db_path() -> Path:
    """``$KVTRACE_DB`` if set, else ``./kvtrace.duckdb``."""
    return Path(os.environ.get("KVTRACE_DB") or DEFAULT_DB)


def _migrations() -> list[tuple[int, str]]:
    out = []
    for p in sorted((queries_dir() / "schema").glob("[0-9][0-9][0-9]_*.sql")):
        out.append((int(p.stem.split("_", 1)[0]), p.stem))
    return out


@functools.cache
def _views_sql() -> tuple[str, str]:
    """The text of ``queries/schema/views.sql`` and its checksum."""
    import hashlib

    sql = load_query("schema/views").sql
    return sql, hashlib.sha256(sql.encode()).hexdigest()


class Store:
    """The warehouse.

    Args:
        path: database file; ``None`` means :func:`default_db_path`.
        memory: an in-memory warehouse (tests).
        read_only: open without migrating or writing (reports beside a running collector).
        tracer: called with every SQL statement and its parameters (``--trace-sql``).
        lock_wait_s: how long to wait for a writer (``kvtrace collect`` ingesting a segment,
            another ingest) that holds the warehouse file before giving up.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        memory: bool = False,
        read_only: bool = False,
        tracer: Callable[[str, Any], None] | None = None,
        lock_wait_s: float = 10.0,
    ):
        self.path = None if memory else Path(path) if path is not None else default_db_path()
        self.tracer = tracer
        self._spill_folders: list[str] = []  # private spill folders, removed on close
        target = ":memory:" if memory else str(self.path)
        if read_only and not memory and not self.path.exists():
            raise SchemaError(
                f"no warehouse at {self.path}", hint="run `kvtrace ingest FILE --db PATH` first, or pass --db"
            )
        created = not memory and not read_only and not self.path.exists()
        self.con = None
        try:
            self.con = self._connect(target, read_only and not memory, lock_wait_s)
            self._prepare(read_only, memory, target, lock_wait_s)
        except BaseException as e:
            if created and not isinstance(e, WarehouseBusy):
                self._remove_unborn()  # closes the connection and removes the half-made file
            elif self.con is not None:
                self.con.close()  # a refused file must not stay open (this process could not reopen it)
            raise

    def _prepare(self, read_only: bool, memory: bool, target: str, lock_wait_s: float) -> None:
        if not read_only:
            self.migrate()
        elif not memory and self._check_version():
            # An older warehouse: migrate it once through a short write connection (the
            # migrations are idempotent), then read as asked.
            self.con.close()
            Store(self.path, lock_wait_s=lock_wait_s).close()
            self.con = self._connect(target, True, lock_wait_s)
            self._check_version()

    def _remove_unborn(self) -> None:
        """A warehouse this open was creating failed to come into being (a full disk): remove the
        half-written file, which DuckDB would otherwise refuse for good as not a database."""
        con = getattr(self, "con", None)
        if con is not None:
            try:
                con.close()
            except Exception:  # noqa: BLE001 - the connection may be invalidated already
                pass
        for p in (self.path, Path(f"{self.path}.wal")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    @staticmethod
    def _connect(target: str, read_only: bool, lock_wait_s: float):
        # DuckDB lets one process write a file; the collector and scheduled runs hold it only for
        # one transaction, so a short wait usually gets through.
        deadline = time.monotonic() + lock_wait_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(target, read_only=read_only)
                con.execute("SET TimeZone = 'UTC'")
                # Never resolve an unknown table name to a Python variable of the caller's scope.
                con.execute("SET python_enable_replacements = false")
                return con
            except duckdb.IOException as e:
                if "not a valid duckdb database" in str(e).lower():
                    raise SchemaError(
                        f"{target} is not a kvtrace warehouse (not a DuckDB database file)",
                        hint="pass --db a warehouse, or a new file name to create one",
                    ) from None
                if "lock" not in str(e).lower():
                    raise SchemaError(
                        f"cannot open warehouse {target}: {str(e).splitlines()[0]}",
                        hint="check the path and its permissions",
                    ) from None
                if time.monotonic() + delay > deadline:
                    raise WarehouseBusy(
                        f"cannot open warehouse {target}: {e}",
                        hint="another kvtrace process holds it for writing; retry when it is done",
                    ) from e
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    # -- schema ------------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply every pending ``queries/schema/NNN_*.sql`` in order; return the names applied."""
        if self.path is not None and not self._is_warehouse():
            raise SchemaError(
                f"{self.path} is a DuckDB database but not a kvtrace warehouse",
                hint="pass --db a warehouse, or a new file name to create one",
            )
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (version INTEGER PRIMARY KEY, "
            "name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in self.con.execute("SELECT version FROM _migrations").fetchall()}
        applied = []
        for version, name in _migrations():
            if version in done:
                continue
            with self.transaction():
                self.con.execute(load_query(f"schema/{name}").sql).fetchall()
                self.con.execute("INSERT INTO _migrations (version, name) VALUES (?, ?)", [version, name])
            applied.append(name)
        sql, digest = _views_sql()
        self.con.execute("CREATE TABLE IF NOT EXISTS _views (sha256 VARCHAR NOT NULL)")
        if self.con.execute("SELECT sha256 FROM _views").fetchall() != [(digest,)]:
            with self.transaction():
                self.con.execute(sql).fetchall()
                self.con.execute("DELETE FROM _views")
                self.con.execute("INSERT INTO _views VALUES (?)", [digest])
            applied.append("views")
        return applied

    def _is_warehouse(self) -> bool:
        """A new (empty) database, or one that kvtrace created: never write into another's tables."""
        names = {
            r[0]
            for r in self.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE NOT temporary AND database_name = current_database()"
            ).fetchall()
        }
        return not names or "_migrations" in names

    def _check_version(self) -> bool:
        """True when the warehouse needs migrations; raises when it is not one or is newer."""
        try:
            have = self.con.execute("SELECT max(version) FROM _migrations").fetchall()[0][0]
        except duckdb.Error as e:
            raise SchemaError(
                f"{self.path} is not a kvtrace warehouse", hint="create one with `kvtrace ingest FILE --db PATH`"
            ) from e
        want = max(v for v, _ in _migrations())
        if have is not None and have > want:
            raise SchemaError(
                f"{self.path} has schema version {have}, newer than this kvtrace ({want})", hint="upgrade kvtrace"
            )
        try:
            views = self.con.execute("SELECT sha256 FROM _views").fetchall()
        except duckdb.Error:
            views = []
        return have is None or have < want or views != [(_views_sql()[1],)]

    # -- access ------------------------------------------------------------------------------
    def _trace(self, sql: str, params: Any) -> None:
        if self.tracer is not None:
            self.tracer(sql, params)

    def execute(self, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        """Run a statement (writes); returns the cursor."""
        self._trace(sql, params)
        return self.con.execute(sql, params) if params is not None else self.con.execute(sql)

    def run(self, sql: str, params: Any = None) -> None:
        """Run statements (a script, too) to completion, discarding any result rows."""
        self.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Any = None) -> Any:
        """The first column of the first row (None if no rows); the result is fully consumed."""
        rows = self.execute(sql, params).fetchall()
        return rows[0][0] if rows else None

    def query(self, sql: str, params: Any = None) -> list[tuple]:
        """Run a query and return its rows."""
        return self.execute(sql, params).fetchall()

    def named(self, name: str, params: dict | None = None) -> duckdb.DuckDBPyConnection:
        """Run the named query ``queries/<name>.sql`` with ``$named`` parameters."""
        return self.execute(load_query(name).sql, params or {})

    def to_polars(self, sql: str, params: Any = None):
        """Run a query (SQL text or a named query) and return a Polars DataFrame."""
        if "\n" not in sql and " " not in sql.strip():
            sql = load_query(sql).sql
        self._trace(sql, params)
        return self.con.sql(sql, params=params).pl()

    def to_arrow(self, sql: str, params: Any = None):
        self._trace(sql, params)
        return self.con.sql(sql, params=params).to_arrow_table()

    def arrow_batches(self, sql: str, params: Any = None, rows: int = 100_000):
        """Run a query and stream its result as Arrow record batches of about ``rows`` rows."""
        self._trace(sql, params)
        return self.con.sql(sql, params=params).to_arrow_reader(rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: commit on success, roll back on any exception (Ctrl-C included)."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            try:
                self.con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # DuckDB ended it already (an invalidated database): the first error says why
            with self._writing():
                raise
        else:
            with self._writing():
                self.con.execute("COMMIT")

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Raise a DuckDB error that says the file could not be written as :class:`WriteFailed`."""
        try:
            yield
        except duckdb.Error as e:
            failed = self._write_failure(e)
            if failed is not None:
                raise failed from None
            raise

    def _write_failure(self, e: BaseException) -> WriteFailed | None:
        """A DuckDB error that says the warehouse file could not be written (a full disk, a file
        size limit, an earlier fatal write error) as one line naming the file and the fix."""
        if not isinstance(e, duckdb.Error):
            return None
        text = str(e)
        low = text.lower()
        if not (isinstance(e, duckdb.FatalException) or any(k in low for k in _WRITE_FAILURES)):
            return None
        reason = text.splitlines()[0].rsplit(": ", 1)[-1].strip() or text
        return WriteFailed(
            f"cannot write the warehouse {self.path or ':memory:'}: {reason}",
            hint="free space on its volume (or raise the file size limit), then run the command again",
        )

    @contextmanager
    def unordered(self) -> Iterator[None]:
        """Let the statements inside write (and return) rows in any order.

        An ``INSERT ... SELECT`` then runs on every thread instead of one: merging 262 k
        parsed requests took 0.40 s instead of 0.74 s (measured). Rows never depend on their
        physical order here: every query that needs an order says ORDER BY.
        """
        self.con.execute("SET preserve_insertion_order = false")
        try:
            yield
        finally:
            self.con.execute("RESET preserve_insertion_order")

    @contextmanager
    def memory_capped(self, limit: int) -> Iterator[None]:
        """Hold DuckDB's own memory to ``limit`` bytes for the statements inside: a large sort
        spills to DuckDB's temporary folder instead of growing the process (DuckDB's default is
        80% of the machine's memory, which leaves nothing for kvtrace's arrays). DuckDB runs them
        on at most one thread per ``MEMORY_PER_THREAD`` of the cap."""
        before, threads = self.con.execute(
            "SELECT current_setting('memory_limit'), current_setting('threads')"
        ).fetchone()
        spill = self.con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
        if not _can_make_folder(spill):
            # DuckDB spills beside the warehouse; where it cannot (read-only media, a file in the
            # way), a private temporary folder takes the spill for the rest of the connection
            # (DuckDB refuses another once it has spilled), removed when the store closes
            own = tempfile.mkdtemp(prefix="kvtrace-spill-")
            self._spill_folders.append(own)
            self.con.execute("SET temp_directory = ?", [own])
        self.con.execute(f"SET memory_limit = '{int(limit)}B'")
        self.con.execute(f"SET threads = {max(1, min(int(threads), int(limit) // MEMORY_PER_THREAD))}")
        try:
            yield
        except duckdb.OutOfMemoryException as e:
            raise KvtraceError(
                f"DuckDB needed more than the {int(limit) >> 20} MiB kvtrace gives one query: "
                + str(e).splitlines()[0],
                hint="narrow the window (--since/--until) or free memory; please report the warehouse's size",
            ) from None
        finally:
            try:
                self.con.execute(f"SET threads = {int(threads)}")
                # DuckDB's default again, unless another limit was set (its text is rounded:
                # setting it back would round the default down)
                self.con.execute("RESET memory_limit")
                if self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0] != before:
                    self.con.execute(f"SET memory_limit = '{before}'")
            except duckdb.Error:
                pass  # an invalidated database refuses it too: the error that ended the block says why

    def checkpoint_bulk(self) -> None:
        """Checkpoint after a bulk insert without merging its partial row groups.

        A bulk insert on N threads leaves up to N partial row groups, and merging them at the
        checkpoint rewrote most of the insert (0.44 s of a 3.5 s ingest of 262 k requests,
        measured). Left as they are, they are merged by the vacuum of a later checkpoint that
        touches the table (the next small insert's), which rewrites only those row groups.
        """
        try:
            with self._writing():
                self.con.execute("SET max_vacuum_tasks = 0")
                self.con.execute("CHECKPOINT")
        finally:
            try:
                self.con.execute("RESET max_vacuum_tasks")  # even when interrupted between the two
            except duckdb.Error:
                pass  # an invalidated database refuses it too: the error above says why

    def close(self) -> None:
        try:
            with self._writing():  # the checkpoint on close may fail to write
                self.con.close()
        finally:
            for folder in self._spill_folders:
                shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - the error that ended the block is the one to report
            pass
