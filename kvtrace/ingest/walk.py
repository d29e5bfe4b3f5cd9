"""The files under a folder that ingest reads, listed the way ``Path`` objects sort."""

from __future__ import annotations

import os

from kvtrace.ingest.formats import INGESTIBLE_SUFFIXES

LEDGER_SQL = "SELECT path, size, mtime_ns, format, forced FROM ingested_files"


def read_ledger(store) -> dict[tuple[str, int, int], dict[str, bool]]:
    """``(path, size, mtime_ns) -> {format: forced}`` of every file in ``ingested_files``: the
    formats it was read as, each with whether ``--input-format`` forced it."""
    out: dict[tuple[str, int, int], dict[str, bool]] = {}
    for r in store.query(LEDGER_SQL):
        out.setdefault((r[0], r[1], r[2]), {})[r[3]] = r[4]
    return out


def walk(root: str, unreadable: list[tuple[str, str]] | None = None) -> list[str]:
    """Ingestible files under ``root`` (an absolute, resolved folder) as absolute paths, sorted as
    ``Path`` objects sort (component by component): each folder's entries are visited by name.

    As ``os.walk``: a link to a folder is neither entered nor listed, an unreadable folder is
    skipped (and added to ``unreadable`` as ``(folder, reason)``), an entry that cannot be
    stat'ed counts as a file.
    """
    out: list[str] = []
    stack = [iter(_list(root, unreadable))]
    while stack:
        for path, is_dir in stack[-1]:
            if is_dir:
                stack.append(iter(_list(path, unreadable)))
                break
            out.append(path)
        else:
            stack.pop()
    return out


def _list(folder: str, unreadable: list | None = None) -> list[tuple[str, bool]]:
    """A folder's subfolders and ingestible files as ``(path, is_folder)``, sorted by name."""
    out = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                try:
                    is_dir = e.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    if not e.is_symlink():
                        out.append((e.name, True))
                elif e.name.endswith(INGESTIBLE_SUFFIXES):
                    out.append((e.name, False))
    except OSError as e:
        if unreadable is not None:
            unreadable.append((folder, e.strerror or str(e)))
        return []
    out.sort()
    base = folder.rstrip(os.sep) + os.sep  # "/" gives "/name"
    return [(base + name, is_dir) for name, is_dir in out]
