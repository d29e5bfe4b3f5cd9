"""``open_store``: how commands open the warehouse."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvtrace.store.store import Store


@contextmanager
def open_store(path: str | Path | None = None, *, read_only: bool = False, **kwargs) -> Iterator[Store]:
    """The warehouse at ``path`` (``None``: :func:`~kvtrace.store.store.default_db_path`), closed
    at the end of the block.

    Args:
        path: the database file.
        read_only: open without writing.
        **kwargs: passed on to :class:`~kvtrace.store.store.Store`.
    """
    with Store(path, read_only=read_only, **kwargs) as store:
        yield store
