"""What a resident process (``kvtrace serve``) keeps between ingests: the ledger and folder listings.

A repeat ingest of a big transcript tree reads the whole ``ingested_files`` ledger and lists
every folder, only to find the one or two files that are new or grew. A process that stays up
keeps both between commands (it holds the warehouse for writing, so no other process writes it):

* the ledger, as a dict that its own ingests update after each commit; it is read again whenever
  the table's row count or latest ``ingested_at`` is not what this process expects (a write it
  did not make), and dropped after any failed ingest;
* each walked folder's sorted listing with the folder's stat: a folder whose mtime, ctime and
  inode are unchanged is not listed again. Files are still stat'ed one by one (a file that grows
  does not change its folder). The listing of a folder whose mtime is within ``RACY_NS`` of the
  walk is not kept: a second change in the same clock tick would leave the mtime as it was.

* the set of request keys, message ids and session ids stored in ``requests`` (as ``hash()``
  values, a superset: values only join it), so that a batch sharing none of them with the
  warehouse (new sessions) is inserted without the merge's joins against every stored row; it
  is rebuilt when the table's row count is not what this process expects, and not kept for a
  warehouse of more than ``KEY_INDEX_MAX_ROWS`` requests (~100 bytes a row).

Off unless :func:`enable` is called: a one-shot command has nothing to keep.
"""

from __future__ import annotations

import os
import time
import weakref

from kvtrace.ingest.formats import INGESTIBLE_SUFFIXES

RACY_NS = 5 * 10**9
KEY_INDEX_MAX_ROWS = 250_000
_KEY_COLUMNS = ("request_key", "message_id", "session_id")

LEDGER_SQL = "SELECT path, size, mtime_ns, format, forced FROM ingested_files"
# What tells a write this process did not make: the ledger's rows and latest time, the requests' rows.
_TOKEN_SQL = ("SELECT l.n, l.latest, r.n FROM (SELECT count(*) AS n, max(ingested_at) AS latest FROM ingested_files) l, "
              "(SELECT count(*) AS n FROM requests) r")

_enabled = False
_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def enable(on: bool = True) -> None:
    """Keep ledgers and folder listings between ingests in this process (``kvtrace serve``)."""
    global _enabled
    _enabled = on
    if not on:
        _states.clear()


class State:
    """One warehouse's kept state."""

    def __init__(self) -> None:
        self.ledger: dict[tuple[str, int, int], dict[str, bool]] | None = None
        self.token: tuple | None = None                 # (rows, latest ingested_at) of that ledger
        self.folders: dict[str, dict[str, tuple]] = {}  # walked root -> folder -> (stat, entries)
        self.keys: set[int] | None = None               # hash() of stored request keys, message and session ids
        self.key_rows = -1                              # requests rows the keys were last in step with


def state(store) -> State | None:
    """The kept state of ``store``'s warehouse, or None when nothing is kept."""
    if not _enabled:
        return None
    st = _states.get(store)
    if st is None:
        st = _states[store] = State()
    return st


def warm(store) -> None:
    """Read the ledger and the stored keys now (a server's start-up) rather than in the first
    ingest."""
    st = state(store)
    if st is not None:
        sync(store, st)
        _keys(store, st)


def forget(store) -> None:
    """Drop what is kept for ``store`` (after a failed ingest: its writes were rolled back)."""
    _states.pop(store, None)


# -- the ledger ----------------------------------------------------------------------------------

def sync(store, st: State | None) -> None:
    """At the start of an ingest: read again what no longer matches the warehouse (the ledger
    now, the stored keys when a merge needs them)."""
    if st is None:
        return
    files, latest, requests = store.query(_TOKEN_SQL)[0]
    if st.ledger is None or (files, latest) != st.token:
        st.ledger = _read_ledger(store)
        st.token = (files, latest)
    if requests != st.key_rows:
        st.keys = None


def ledger(store, st: State | None) -> dict[tuple[str, int, int], dict[str, bool]]:
    """``(path, size, mtime_ns) -> {format: forced}`` of every file in ``ingested_files``: the
    formats it was read as, each with whether ``--input-format`` forced it."""
    if st is None:
        return _read_ledger(store)
    if st.ledger is None:
        sync(store, st)
    return st.ledger


def _read_ledger(store) -> dict[tuple[str, int, int], dict[str, bool]]:
    out: dict[tuple[str, int, int], dict[str, bool]] = {}
    for r in store.query(LEDGER_SQL):
        out.setdefault((r[0], r[1], r[2]), {})[r[3]] = r[4]
    return out


def recorded(st: State | None, rows: list[tuple]) -> None:
    """Note ledger rows (path, size, mtime_ns, format, ingested_at, ..., forced) that a committed
    ``INSERT ... ON CONFLICT DO NOTHING`` wrote: a key already there kept its row."""
    if st is None or st.ledger is None:
        return
    count, latest = st.token
    for row in rows:
        formats = st.ledger.setdefault((row[0], row[1], row[2]), {})
        if row[3] not in formats:
            formats[row[3]] = row[-1]
            count += 1
            latest = row[4] if latest is None or row[4] > latest else latest
    st.token = (count, latest)


# -- stored keys ---------------------------------------------------------------------------------

def key_hashes(staged) -> set[int]:
    """The hashes of a staged Arrow table's request keys, message ids and session ids."""
    return {hash(v) for c in _KEY_COLUMNS for v in staged.column(c).to_pylist() if v is not None}


def may_match(store, st: State | None, hashes: set[int] | None) -> bool:
    """Whether a staged row (its :func:`key_hashes`) may share a request key, message id or
    session id with a stored request: False only when provably none does."""
    keys = _keys(store, st) if st is not None else None
    if keys is None:
        return True
    return not keys.isdisjoint(hashes)


def _keys(store, st: State) -> set[int] | None:
    """The stored keys (after :func:`sync`, which drops them when the row count is not the one
    they were in step with), read again if dropped; None over ``KEY_INDEX_MAX_ROWS``."""
    if st.keys is None:
        rows = store.scalar("SELECT count(*) FROM requests")
        if rows > KEY_INDEX_MAX_ROWS:
            return None
        st.keys = {hash(v) for row in store.query(f"SELECT {', '.join(_KEY_COLUMNS)} FROM requests")
                   for v in row if v is not None}
        st.key_rows = rows
    elif st.key_rows > KEY_INDEX_MAX_ROWS:
        st.keys = None
    return st.keys


def merged(st: State | None, hashes: set[int] | None, rows_added: int) -> None:
    """After a merge of staged rows (their :func:`key_hashes`) that changed the row count by
    ``rows_added``: their values join the stored keys (the merge's updates only copy staged
    values into stored rows)."""
    if st is None or st.keys is None:
        return
    st.keys |= hashes
    st.key_rows += rows_added


# -- folders -------------------------------------------------------------------------------------

def walk(root: str, st: State | None, unreadable: list[tuple[str, str]] | None = None) -> list[str]:
    """Ingestible files under ``root`` (an absolute, resolved folder) as absolute paths, sorted as
    ``Path`` objects sort (component by component): each folder's entries are visited by name.

    As ``os.walk``: a link to a folder is neither entered nor listed, an unreadable folder is
    skipped (and added to ``unreadable`` as ``(folder, reason)``), an entry that cannot be
    stat'ed counts as a file.
    """
    kept = st.folders.get(root, {}) if st is not None else None
    fresh: dict[str, tuple] | None = {} if st is not None else None
    now = time.time_ns()

    def entries(folder: str) -> list[tuple[str, bool]]:
        """``(path, is_folder)`` of the folder's entries, by name."""
        if kept is None:
            return _list(folder, unreadable)[0]
        try:
            s = os.stat(folder)
        except OSError as e:
            if unreadable is not None:
                unreadable.append((folder, e.strerror or str(e)))
            return []
        stamp = (s.st_mtime_ns, s.st_ctime_ns, s.st_ino, s.st_dev)
        old = kept.get(folder)
        if old is not None and old[0] == stamp:
            fresh[folder] = old
            return old[1]
        listed, has_links = _list(folder, unreadable)
        # A link's target can turn from a file into a folder without the folder changing.
        # An entry added or removed later sets the mtime to that moment: unless the mtime we saw
        # is that recent (the same clock tick), a change shows. ctime is in the stamp for a
        # change that puts an old mtime back.
        if not has_links and now - s.st_mtime_ns > RACY_NS:
            fresh[folder] = (stamp, listed)
        return listed

    out: list[str] = []
    stack = [iter(entries(root))]
    while stack:
        for path, is_dir in stack[-1]:
            if is_dir:
                stack.append(iter(entries(path)))
                break
            out.append(path)
        else:
            stack.pop()
    if st is not None:
        st.folders[root] = fresh
    return out


def _list(folder: str, unreadable: list | None = None) -> tuple[list[tuple[str, bool]], bool]:
    """A folder's subfolders and ingestible files as ``(path, is_folder)`` sorted by name, and
    whether it holds links."""
    out, links = [], False
    try:
        with os.scandir(folder) as it:
            for e in it:
                try:
                    is_dir = e.is_dir()
                except OSError:
                    is_dir = False
                link = e.is_symlink()
                links = links or link
                if is_dir:
                    if not link:
                        out.append((e.name, True))
                elif e.name.endswith(INGESTIBLE_SUFFIXES):
                    out.append((e.name, False))
    except OSError as e:
        if unreadable is not None:
            unreadable.append((folder, e.strerror or str(e)))
        return [], True        # not kept: listed again next time
    out.sort()
    base = folder.rstrip(os.sep) + os.sep      # "/" gives "/name"
    return [(base + name, is_dir) for name, is_dir in out], links
