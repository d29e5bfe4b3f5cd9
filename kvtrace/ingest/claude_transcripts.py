"""Claude Code transcripts (``~/.claude/projects/**/*.jsonl``) -> one ``requests`` row per API response.

A batch parser: the pipeline hands it many files at once (up to ``BATCH_BYTES``), read by DuckDB
on a private in-memory database (kept for the process, see ``_Db``), because a Python loop over
the lines is several times slower than the files take to read. The files are split into one
group per core; each group's lines are filtered and parsed on its own cursor in parallel
(``queries/ingest/transcripts_lines.sql``), then one query de-duplicates the whole batch
(``queries/ingest/transcripts_requests.sql``). Files DuckDB cannot read as text (gzip, bytes
that are not UTF-8, such as a line torn inside a character while the CLI writes it; a file that
vanished) are read in Python and go through the same query as one more group: each costs its own
read, not the batch's.

Only lines containing the JSON token ``"assistant"`` (or ``"compact_boundary"``) are parsed;
the match does not depend on whitespace, and a line is used only if its parsed top-level
``type`` is ``assistant`` (a ``progress`` line embedding a subagent's message is not).

De-duplication (``docs/formats.md`` §3): a response is written as one line per content
block, each with a full copy of ``usage``, so lines are grouped by ``message.id`` and a group
counts once with its largest ``output_tokens``; a copy of the same response in a subagent or
``/btw`` file (a sidechain replay, often under a new ``requestId``) or in a resumed/branched
session file counts once, the main-thread copy winning. Across batches the warehouse merge
(``queries/ingest/merge_requests.sql``) applies the same rules.

Counted in ``Parsed.unknown`` and not stored: synthetic and API-error records, assistant records
without usage, an unterminated (torn) last line of a file still being written, and
``compact_boundary`` markers. A malformed candidate line anywhere else is a ``Reject``. Lines that
are not candidates (user, progress, snapshot records: most of the bytes) are never parsed, so a
malformed one of those is not reported.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from kvtrace.ingest.base import REQUEST_SCHEMA, Parsed, Reject, arrow_as
from kvtrace.ingest.agent_files import BAD_COUNT
from kvtrace.ingest.formats import damage_reason, read_whole
from kvtrace.store import load_query

# Why a parsed candidate line was not used: a problem (-> Reject) ...
_REJECTS = {
    "malformed": ("malformed JSON", None),
    "bad_count": BAD_COUNT,  # field: the line's bad_field
    "bad_timestamp": ("missing or unreadable timestamp (want ISO 8601)", "timestamp"),
    "no_id": ("an assistant record with usage but neither message.id nor requestId", "message.id"),
}
# ... or a record kind counted in Parsed.unknown.
_COUNTED = ("torn_last_line", "synthetic", "api_error", "assistant_without_usage", "compact_boundary")

_MAX_GROUPS = 4  # parallel groups (connections) at most
_PY_GROUP = _MAX_GROUPS  # the group (cursor, table) of the files read in Python

# Below this many bytes one connection is quicker than starting threads.
_PARALLEL_BYTES = 16 << 20


def parse(paths: list[Path]) -> Parsed:
    """Read a batch of transcript files into one ``requests`` table, de-duplicated by message id.

    Args:
        paths: transcript files (``.jsonl``; ``.jsonl.gz`` too), typically a whole
            ``~/.claude/projects`` tree or a part of it.

    Returns:
        A :class:`~kvtrace.ingest.base.Parsed` with ``requests`` (REQUEST_SCHEMA columns),
        the rejected lines (each naming its file) and counts of records not used.
    """
    paths = [Path(p) for p in paths]
    parsed = Parsed()
    if not paths:
        parsed.requests = REQUEST_SCHEMA.empty_table()
        return parsed
    with _connection() as db:
        con = db.cursor(0)
        con.register("tx_files", _files_table(paths))
        groups = _parse_groups(db, paths, parsed)
        db.union_view(groups)
        _collect(con, parsed, paths)
    return parsed


class _Db:
    """Connections for one parse at a time: cursor ``k`` parses group ``k`` (``_PY_GROUP``: the
    files read in Python), cursor 0 collects.

    Each parse has its own in-memory DuckDB, with its cursors set up once (settings, the views
    over the file list). A cursor's temporary views and registrations are its own; the
    ``main.tx_rec_<k>`` tables are shared by a parse's cursors.
    """

    def __init__(self, con):
        self.con = con
        self.cursors: dict[int, object] = {}
        self.view_groups: tuple = ()  # the groups the temp view tx_rec of cursor 0 reads
        self.one_thread = False  # DuckDB's own threads set to 1 (small batches)
        self.raw_views: set[int] = set()  # cursors with their view tx_raw

    def cursor(self, k: int):
        cur = self.cursors.get(k)
        if cur is None:
            cur = self.con.cursor()
            cur.execute("SET TimeZone = 'UTC'")
            # Every result is ordered explicitly; keeping insertion order makes storing tx_rec ~1.5x slower.
            cur.execute("SET preserve_insertion_order = false")
            cur.execute(
                "CREATE OR REPLACE TEMP VIEW tx_names AS "
                "SELECT unnest(getvariable('tx_names')) AS filename, unnest(getvariable('tx_idx')) AS file_idx"
            )
            self.cursors[k] = cur
        return cur

    def names(self, k: int, names: list[str], idx: list[int], raw: bool = True) -> None:
        """The file list that cursor ``k``'s views ``tx_names(filename, file_idx)`` and (``raw``)
        ``tx_raw`` read (read_blob gives filenames back as given). A file whose bytes are not
        UTF-8 reads as NULL content (no lines): reading it as text would fail the statement."""
        cur = self.cursor(k)
        cur.execute("SET VARIABLE tx_names = ?", [names])
        cur.execute("SET VARIABLE tx_idx = ?", [idx])
        if raw and k not in self.raw_views and names:  # read_blob needs the list to bind the view
            cur.execute(
                "CREATE OR REPLACE TEMP VIEW tx_raw AS "
                "SELECT filename, try(decode(content)) AS content FROM read_blob(getvariable('tx_names'))"
            )
            self.raw_views.add(k)

    def threads_for(self, total_bytes: int) -> None:
        """One DuckDB thread for a small batch: scheduling a few kilobytes' pipelines on two
        threads costs more than it saves (~10% of a one-session parse)."""
        one = total_bytes < _PARALLEL_BYTES
        if one != self.one_thread:
            self.con.execute("SET threads = 1" if one else "RESET threads")
            self.one_thread = one

    def union_view(self, groups: tuple[int, ...]) -> None:
        if groups != self.view_groups:
            self.cursor(0).execute(
                "CREATE OR REPLACE TEMP VIEW tx_rec AS "
                + " UNION ALL ".join(f"SELECT * FROM main.tx_rec_{k}" for k in groups)
            )
            self.view_groups = groups

    def close(self) -> None:
        for cur in self.cursors.values():
            cur.close()
        self.con.close()


@contextmanager
def _connection():
    """A new in-memory DuckDB for one parse (10-20 ms), closed after it."""
    import duckdb

    db = _Db(duckdb.connect())
    try:
        yield db
    finally:
        db.close()


def _parse_group(db: _Db, k: int, paths: list[Path], idx: list[int], in_python: set[int]) -> bool:
    """Filter and parse one group of plain files on cursor ``k``; returns whether it made its
    table. A file whose bytes are not UTF-8 yields no line there (every other file has its last
    piece, with the file's line count) and goes to ``in_python``; so does one that cannot be read
    (gone since it was listed: found by reading the group's files once more, only after such a
    failure; all of them if none is found)."""
    import duckdb

    cur = db.cursor(k)
    try:
        db.names(k, [str(paths[i]) for i in idx], idx)
        _run_lines(cur, k)
    except (duckdb.IOException, duckdb.InvalidInputException, duckdb.ConversionException):
        bad = {i for i in idx if not _is_readable(paths[i])} or set(idx)
        in_python.update(bad)
        rest = [i for i in idx if i not in bad]
        if not rest:
            return False
        db.names(k, [str(paths[i]) for i in rest], rest)
        _run_lines(cur, k)
    in_python.update(
        i
        for (i,) in cur.execute(
            f"SELECT file_idx FROM tx_names ANTI JOIN (SELECT file_idx FROM main.tx_rec_{k} WHERE file_lines IS NOT NULL) "
            "USING (file_idx)"
        ).fetchall()
    )
    return True


def _is_readable(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError:
        return False
    return True


def _run_lines(cur, k: int) -> None:
    """Parse tx_raw's candidate lines into table ``tx_rec_<k>``."""
    sql = load_query("ingest/transcripts_lines").sql
    named = sql.replace("CREATE OR REPLACE TABLE tx_part AS", f"CREATE OR REPLACE TABLE main.tx_rec_{k} AS", 1)
    assert named != sql, "ingest/transcripts_lines.sql must create table tx_part"
    cur.execute(named)


def _parse_groups(db: _Db, paths: list[Path], parsed: Parsed) -> tuple[int, ...]:
    """Parse the plain files, one group per core in parallel, then those DuckDB cannot read
    (gzip, gone, not UTF-8) in Python; returns the groups (table numbers) parsed."""
    in_python, sizes = set(), {}
    for i, p in enumerate(paths):
        try:
            if not p.name.endswith(".gz"):
                sizes[i] = p.stat().st_size
                continue
        except OSError:  # gone: the Python read says so
            pass
        in_python.add(i)
    total = sum(sizes.values())
    db.threads_for(total)
    n_groups = min(os.cpu_count() or 1, _MAX_GROUPS, len(sizes)) if total >= _PARALLEL_BYTES else 1
    groups: list[list[int]] = [[] for _ in range(max(n_groups, 1))]
    load = [0] * len(groups)
    for i in sorted(sizes, key=lambda i: -sizes[i]):  # largest first, to the lightest group
        g = load.index(min(load))
        groups[g].append(i)
        load[g] += sizes[i]
    groups = [g for g in groups if g]
    made = [False] * len(groups)
    if len(groups) == 1:
        made[0] = _parse_group(db, 0, paths, groups[0], in_python)
    elif groups:
        _parse_parallel(db, paths, groups, in_python, made)
    done = tuple(k for k in range(len(groups)) if made[k])
    if in_python:
        _parse_in_python(db, paths, sorted(in_python), parsed)
        done += (_PY_GROUP,)
    return done


def _parse_parallel(db: _Db, paths: list[Path], groups: list[list[int]], in_python: set[int], made: list[bool]) -> None:
    """Parse each group on its own cursor in its own thread (``_parse_group``)."""
    cursors = [db.cursor(k) for k in range(len(groups))]
    errors: list[BaseException | None] = [None] * len(groups)

    def work(k: int) -> None:
        try:
            made[k] = _parse_group(db, k, paths, groups[k], in_python)
        except BaseException as e:  # re-raised in the calling thread
            errors[k] = e

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(len(groups))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: stop the queries still running, then give up
        for c in cursors:
            c.interrupt()
        for t in threads:
            t.join()
        raise
    for e in errors:
        if e is not None:
            raise e


def _parse_in_python(db: _Db, paths: list[Path], idx: list[int], parsed: Parsed) -> None:
    """Read files in Python (gzip, undecodable bytes replaced, unreadable files rejected) and
    parse them as group ``_PY_GROUP``."""
    read, texts = [], []
    for i in idx:
        p = paths[i]
        try:
            data, damage = read_whole(p)
        except OSError as e:
            parsed.rejects.append(Reject(None, f"cannot read: {e}", path=str(p)))
            continue
        if damage:  # the whole lines before it are read
            parsed.rejects.append(Reject(None, damage_reason(damage), path=str(p)))
        read.append(i)
        texts.append(data.decode("utf-8", errors="replace"))
    names = [str(paths[i]) for i in read]
    con = db.cursor(_PY_GROUP)
    db.names(_PY_GROUP, names, read, raw=False)
    con.register(
        "tx_raw", pa.table({"filename": pa.array(names, pa.string()), "content": pa.array(texts, pa.large_string())})
    )
    try:
        _run_lines(con, _PY_GROUP)
    finally:
        con.unregister("tx_raw")


def _collect(con, parsed: Parsed, paths: list[Path]) -> None:
    """Line count, rejects and counts from the parsed lines (one query), then the de-duplicated
    requests."""
    rejects = []
    for kind, n, lines, at in con.execute(
        "SELECT kind, count(*), coalesce(sum(file_lines), 0), "
        "CASE WHEN kind IN ('malformed', 'bad_count', 'bad_timestamp', 'no_id') "
        "THEN list((file_idx, lineno, bad_field, bad_value)) END FROM tx_rec GROUP BY kind"
    ).fetchall():
        parsed.lines += int(lines)
        if kind in _COUNTED:
            parsed.unknown[kind] += n
        rejects.extend((*r, kind) for r in at or ())
    for file_idx, lineno, bad_field, bad_value, kind in sorted(rejects, key=lambda r: r[:2]):
        reason, field = _REJECTS[kind]
        if kind == "bad_count":
            reason, field = f"{reason}, got {bad_value}", bad_field
        parsed.rejects.append(Reject(lineno, reason, field=field, path=str(paths[file_idx])))
    parsed.requests = arrow_as(con.sql(load_query("ingest/transcripts_requests").sql), REQUEST_SCHEMA)


def _files_table(paths: list[Path]) -> pa.Table:
    """Per file: the project folder under ``projects/`` and, for a subagent file, its agent id."""
    projects, agent_ids, is_agent = [], [], []
    for p in paths:
        parts = p.parts
        project = None
        for i in range(len(parts) - 2, -1, -1):  # the nearest ``projects`` folder above the file
            if parts[i] == "projects":
                project = parts[i + 1] if i + 1 < len(parts) - 1 else None
                break
        projects.append(project)
        stem = p.name.split(".", 1)[0]
        is_agent.append(stem.startswith("agent-") or p.parent.name == "subagents")
        agent_ids.append(stem[len("agent-") :] if stem.startswith("agent-") else None)
    return pa.table(
        {
            "file_idx": pa.array(range(len(paths)), pa.int32()),
            "path": pa.array([str(p) for p in paths], pa.string()),
            "project": pa.array(projects, pa.string()),
            "file_agent_id": pa.array(agent_ids, pa.string()),
            "file_is_agent": pa.array(is_agent, pa.bool_()),
        }
    )
