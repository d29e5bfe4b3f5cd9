"""``open_store``: how commands open the warehouse, with a seam for ``kvtrace serve``.

A command opens its warehouse with ``with open_store(db, read_only=...) as store``. In a plain
process that is ``Store(db, ...)``, closed at the end. Inside ``kvtrace serve`` the server's own
open Store is handed out instead (DuckDB refuses a second connection to the same file with
another configuration in one process) and is left open: see :func:`sharing`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvtrace.store.store import Store, default_db_path

_shared: Store | None = None


@contextmanager
def open_store(path: str | Path | None = None, *, read_only: bool = False, **kwargs) -> Iterator[Store]:
    """The warehouse at ``path`` (``None``: :func:`~kvtrace.store.store.default_db_path`).

    Args:
        path: the database file.
        read_only: open without writing (a shared server Store is a writer: it is handed out
            inside a read-only transaction).
        **kwargs: passed on to :class:`~kvtrace.store.store.Store`.
    """
    shared = _shared
    if shared is not None and shared.path is not None and _same_file(path, shared.path):
        if not read_only:
            yield shared
            return
        # the server's connection writes: a command that asked to only read gets a read-only
        # transaction on it, so it cannot write even by a query that tries to (DuckDB refuses)
        shared.con.execute("BEGIN TRANSACTION READ ONLY")
        try:
            yield shared
        finally:
            shared.con.execute("ROLLBACK")
        return
    with Store(path, read_only=read_only, **kwargs) as store:
        yield store


def _same_file(path: str | Path | None, other: Path) -> bool:
    return os.path.realpath(path if path is not None else default_db_path()) == os.path.realpath(other)


@contextmanager
def sharing(store: Store) -> Iterator[None]:
    """Within the block, :func:`open_store` of ``store``'s file yields ``store`` and does not close it."""
    global _shared
    before, _shared = _shared, store
    try:
        yield
    finally:
        _shared = before
