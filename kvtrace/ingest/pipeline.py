"""The ingest pipeline: expand inputs, detect formats, parse, merge into the warehouse.

Guarantees: ingesting the same input twice adds nothing (rows are keyed; see
``queries/ingest/merge_requests.sql``); each file (or each batch of small files read in one
pass) is one transaction, so an error or Ctrl-C leaves nothing half-written; an unchanged file
(same path, size and mtime) is not read again.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kvtrace.errors import BadTraceInput, KvtraceError, UnknownFormat
from kvtrace.ingest.base import Parsed, Reject, reject_implausible_times
from kvtrace.ingest import resume
from kvtrace.ingest.formats import BLOCK_FORMATS, FORMATS, LFS_HINT, get_format, is_lfs_pointer, sniff
from kvtrace.ingest.walk import read_ledger, walk
from kvtrace.store import Store, load_query
from kvtrace.store.store import ROW_GROUP_ROWS

BATCH_BYTES = 512 << 20  # batch parsers read at most this much per transaction (peak RSS ~0.6 GB)
# Files of a one-file format up to SMALL_FILE_BYTES are read together (Format.small), up to
# SMALL_BATCH_BYTES and SMALL_BATCH_FILES per transaction: a parse and a transaction cost more
# than a small file's lines.
SMALL_FILE_BYTES = 1 << 20
SMALL_BATCH_BYTES = 64 << 20
SMALL_BATCH_FILES = 2000
MAX_REPORTED_REJECTS = 50


@dataclass
class IngestSummary:
    """What one ``ingest`` call did (``--json`` prints it)."""

    files: int = 0
    files_skipped: int = 0  # unchanged since a previous ingest
    files_resumed: int = 0  # grown since a previous ingest: read from where it stopped
    requests_added: int = 0
    metric_points_added: int = 0
    block_requests_added: int = 0
    duplicates_skipped: int = 0
    # stored rows that a new copy showed to be copies of another stored row, and merged into it
    # (a sidechain replay under a request id of its own: see queries/ingest/merge_fold.sql)
    requests_folded: int = 0
    lines_rejected: int = 0
    rejects: list[str] = field(default_factory=list)  # first MAX_REPORTED_REJECTS, "file:line: reason"
    unknown_records: dict[str, int] = field(default_factory=dict)
    formats: dict[str, int] = field(default_factory=dict)
    files_stored: int = 0  # files whose transaction committed (the counts above are theirs)
    files_pending: list[str] = field(default_factory=list)  # the unit being read when the ingest stopped
    # "path: reason" of what a walk or a glob found but could not read: not a regular file (a FIFO,
    # a device, a broken link), unreadable, empty, a damaged .gz; such files are not in the ledger
    skipped: list[str] = field(default_factory=list)
    # inputs that yielded nothing: a file whose every line was rejected, a folder or glob in
    # which no file was recognised (the CLI exits non-zero)
    yielded_nothing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a file that yielded nothing under --input-format

    def to_dict(self) -> dict:
        return asdict(self)


# -- inputs --------------------------------------------------------------------------------------


def expand_inputs(
    paths: Iterable[str | Path], stdin_dir: Path | None = None, walked: set[Path] | None = None
) -> list[Path]:
    """Files, folders (recursive), globs and ``-`` (stdin, copied to a temporary file).

    Files found by walking a folder are added to ``walked`` (when given): an unrecognized one
    there is skipped and counted, while a file named on the command line must be readable.
    """
    found: set[str] = set()
    out = [Path(p) for p in _expand(paths, stdin_dir, found)]
    if walked is not None:
        walked.update(Path(p) for p in found)
    return out


def _expand(
    paths: Iterable[str | Path],
    stdin_dir: Path | None,
    walked: set[str],
    groups: list | None = None,
    unreadable: list | None = None,
) -> list[str | Path]:
    """:func:`expand_inputs` with the files of walked folders as absolute path strings (in
    ``walked`` too): for a tree of thousands of files, Path objects cost several times the walk.
    ``groups``: gets ``(input, its files)`` of each folder and glob; ``unreadable``:
    ``(folder, reason)`` of each subfolder a walk could not list. Files matched by a glob are
    in ``walked`` too: one that cannot be read or recognised is skipped, not fatal."""
    groups = [] if groups is None else groups
    out: list[str | Path] = []
    inputs = 0
    for raw in paths:
        inputs += 1
        s = str(raw)
        if s == "-":
            if stdin_dir is None:
                raise KvtraceError("stdin input needs a temporary folder")
            tmp = stdin_dir / "stdin.jsonl"
            with open(tmp, "wb") as fh:
                shutil.copyfileobj(sys.stdin.buffer, fh)
            out.append(tmp)
            continue
        p = Path(s).expanduser()
        if p.is_dir():
            root, bad = str(p.resolve()), []
            found = walk(root, bad)
            if bad and bad[0][0] == root:
                raise KvtraceError(
                    f"{s}: cannot read the folder: {bad[0][1]}",
                    hint="check its permissions, or run as a user who can read it",
                )
            if unreadable is not None:
                unreadable.extend(bad)
            out.extend(found)
            walked.update(found)
            groups.append((s, found))
        elif p.is_file():
            out.append(p)
        elif any(c in s for c in "*?["):
            matches = sorted(Path(m) for m in glob.glob(os.path.expanduser(s), recursive=True))
            if not matches:
                raise KvtraceError(
                    f"{s}: no file matches", hint="check the pattern, or quote it so the shell does not expand it"
                )
            found = _expand(matches, None, walked, None, unreadable)
            walked.update(found)
            out.extend(found)
            groups.append((s, found))
        elif os.path.lexists(p):
            out.append(p)  # a FIFO, a device, a broken link: _stat says what it is
        else:
            raise KvtraceError(f"{s}: no such file or folder", hint="pass files, folders, globs or - for stdin")
    if inputs == 1:
        return out  # one input names each file once
    seen, unique = set(), []
    for p in out:
        key = p if isinstance(p, str) else os.path.abspath(p)  # walked files are absolute already
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


_EMPTY = "empty"


class _NotReadable(Exception):
    """Why a path cannot be ingested before it is even opened (the message is the reason)."""


def _stat(p: Path) -> tuple[str, int, int]:
    """The ledger key of a regular file; raises :class:`_NotReadable` for anything else."""
    # abspath, not resolve(): resolve() lstat()s every component of every path (a third of a
    # repeat ingest of a big transcript tree); folders are resolved once in _expand.
    # The later of mtime and ctime: a tool can put an old mtime back after rewriting a file in
    # place with the same size, but not the ctime (a chmod only costs one harmless re-read).
    try:
        st = os.stat(p)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise _NotReadable(
                "a broken link (its target does not exist)" if os.path.islink(p) else "gone (removed while kvtrace ran)"
            ) from None
        raise _NotReadable(f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "not a file"
        )
        raise _NotReadable(f"not a regular file ({kind})")
    if st.st_size == 0:
        raise _NotReadable(_EMPTY)
    return p if isinstance(p, str) else os.path.abspath(p), st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)


_NOT_READABLE_HINT = "kvtrace reads regular files; pipe a stream in with `kvtrace ingest -`"


# -- merge ---------------------------------------------------------------------------------------


def _merge(store: Store, parsed: Parsed, summary: IngestSummary) -> None:
    con = store.con
    for name, table in parsed.tables().items():
        con.register("staged_in", table)
        try:
            n_in = table.num_rows
            if name == "requests":
                added, folded = _merge_requests(store, table)
                summary.requests_added += added
                summary.requests_folded += folded
                summary.duplicates_skipped += n_in - added
            else:
                if name == "block_requests":
                    _check_block_size(store)
                added = store.scalar(
                    load_query("ingest/merge_points").sql
                    if name == "metric_points"
                    else f"INSERT INTO {name} BY NAME SELECT * FROM staged_in ON CONFLICT DO NOTHING"
                )
                setattr(summary, f"{name}_added", getattr(summary, f"{name}_added") + added)
                summary.duplicates_skipped += n_in - added
        finally:
            con.unregister("staged_in")


def _check_block_size(store: Store) -> None:
    """A block trace read again with another block size (``--block-size``) would keep its stored
    rows and size without a word: refuse it."""
    clash = store.query(
        "SELECT s.trace, b.block_size, s.block_size, s.ingested_from FROM staged_in s "
        "JOIN block_requests b USING (trace, seq) WHERE b.block_size <> s.block_size LIMIT 1"
    )
    if clash:
        trace, stored, read, where = clash[0]
        raise BadTraceInput(
            where.rpartition(":")[0],
            None,
            f"trace '{trace}' is stored with {stored} tokens per block, this read gives {read}",
            field="block_size",
            hint=f"ingest it into another warehouse (--db) to keep both, or read it with --block-size {stored}",
        )


def _merge_requests(store: Store, table) -> tuple[int, int]:
    """Merge the requests registered as ``staged_in``; returns how many of them became rows of
    their own, and how many stored rows were folded into another (see :func:`_fold_copies`).

    An INSERT's or CREATE TABLE AS's result is its row count, so a batch that matches no stored
    row (new sessions: the common case) costs two statements: ingest/merge_match and one INSERT.
    """
    staged = _stage_unique(store, table)
    folded = 0
    if store.scalar(
        "CREATE OR REPLACE TEMP VIEW staged AS SELECT * FROM " + staged + ";\n" + load_query("ingest/merge_match").sql
    ):
        before = store.scalar("SELECT count(*) FROM requests")
        store.run(load_query("ingest/merge_requests").sql)
        folded = _fold_copies(store)
        change = store.scalar("SELECT count(*) FROM requests") - before
    else:
        change = store.scalar(f"INSERT INTO requests BY NAME SELECT * FROM {staged}")
    return change + folded, folded


def _fold_copies(store: Store) -> int:
    """Stored rows that the merge showed to be copies of one request (ingest/merge_fold) become
    one: the second-ranked row of each group is taken out and merged again as a staged copy,
    until none is left (each round removes a row, so this ends). Returns the rows folded."""
    if not store.scalar(load_query("ingest/merge_fold").sql):
        return 0
    copies = store.con.sql(
        "SELECT * FROM requests WHERE request_key IN (SELECT request_key FROM fold_out)"
    ).to_arrow_table()
    store.run("DELETE FROM requests WHERE request_key IN (SELECT request_key FROM fold_out)")
    store.con.register("staged_in", copies)
    added, folded = _merge_requests(store, copies)
    return copies.num_rows - added + folded  # the copies that merged, and what folding them folded


# Up to this many staged rows, uniqueness is checked in Python: a statement costs more.
_PY_UNIQUE_ROWS = 5000


def _stage_unique(store: Store, table) -> str:
    """The staged requests with one row per key and per message id: ``staged_in`` itself, or
    the table ``staged_dedup``.

    Most inputs repeat neither (an OTLP file, a batch of transcripts the parser has already
    reduced), and two distinct counts cost a tenth of the window passes that would find that out.
    """
    if table.num_rows <= _PY_UNIQUE_ROWS:
        keys = table.column("request_key").to_pylist()
        ids = [m if m is not None else k for m, k in zip(table.column("message_id").to_pylist(), keys)]
        # count(DISTINCT x) = count(*) in SQL: a NULL key makes the batch "not unique" there too
        unique = None not in keys and len(set(keys)) == len(keys) and len(set(ids)) == len(ids)
    else:
        unique = store.scalar(
            "SELECT count(DISTINCT request_key) = count(*) "
            "AND count(DISTINCT coalesce(message_id, request_key)) = count(*) FROM staged_in"
        )
    if unique:
        return "staged_in"
    store.run(load_query("ingest/merge_dedup").sql)
    return "staged_dedup"


def _refuse_rejects(parsed: Parsed, default_path: str) -> None:
    """Under ``--strict`` a rejected line is fatal: nothing of its unit is stored."""
    if parsed.rejects:
        r: Reject = parsed.rejects[0]
        raise BadTraceInput(
            r.path or default_path,
            r.line,
            r.reason,
            field=r.field,
            hint="fix or remove the line, or ingest without --strict to skip bad lines",
        )


def _record_rejects(parsed: Parsed, default_path: str, summary: IngestSummary) -> None:
    """Count a stored unit's rejects (after its commit: a unit rolled back and read again, as
    the collector's worker retries a failed chunk segment by segment, counts them once)."""
    summary.lines_rejected += len(parsed.rejects)
    room = MAX_REPORTED_REJECTS - len(summary.rejects)
    summary.rejects.extend(r.describe(default_path) for r in parsed.rejects[: max(room, 0)])
    for kind, n in parsed.unknown.items():
        summary.unknown_records[kind] = summary.unknown_records.get(kind, 0) + n


# -- driver --------------------------------------------------------------------------------------


def ingest(
    store: Store,
    paths: Iterable[str | Path],
    *,
    format: str | None = None,
    strict: bool = False,
    progress: bool = False,
    force: bool = False,
    summary: IngestSummary | None = None,
    block_size: int | None = None,
) -> IngestSummary:
    """Ingest files, folders, globs or ``-`` into ``store``.

    Args:
        store: the warehouse (opened for writing).
        paths: inputs; folders are walked recursively for ``*.jsonl``/``*.json`` (``.gz`` too).
        format: force a format (see ``kvtrace.ingest.formats.FORMATS``); default: detect per file.
        block_size: tokens per block of block-hash traces that do not say (stored with their
            requests; default: the format's, with a warning); a file's own size must agree.
        strict: a malformed line is fatal (nothing of that file is stored) instead of skipped.
        progress: show a rich progress bar on stderr.
        force: read files again even if unchanged since the last ingest (still adds nothing twice).
        summary: the :class:`IngestSummary` to fill (default: a new one). A caller that passes
            its own sees, when the ingest raises (Ctrl-C, a bad file under ``strict``), what was
            committed before: its counts are those of the stored files only, and
            ``files_pending`` names the files whose transaction was rolled back.

    Returns:
        An :class:`IngestSummary`.
    """
    summary = IngestSummary() if summary is None else summary
    forced = get_format(format) if format else None
    paths = list(paths)
    with (
        tempfile.TemporaryDirectory(prefix="kvtrace-")
        if any(str(p) == "-" for p in paths)
        else contextlib.nullcontext()
    ) as tmp:
        _ingest_files(store, paths, Path(tmp) if tmp else None, forced, strict, progress, force, summary, block_size)
    if summary.requests_added + summary.metric_points_added + summary.block_requests_added >= ROW_GROUP_ROWS:
        store.checkpoint_bulk()
    return summary


def _ingest_files(
    store: Store,
    paths: list,
    stdin_dir: Path | None,
    forced,
    strict: bool,
    progress: bool,
    force: bool,
    summary: IngestSummary,
    block_size: int | None = None,
) -> None:
    walked: set[str] = set()
    groups: list[tuple[str, list]] = []
    unreadable: list[tuple[str, str]] = []
    files = _expand(paths, stdin_dir, walked, groups, unreadable)
    summary.files = len(files)
    summary.skipped.extend(f"{folder}: cannot read the folder: {why}" for folder, why in unreadable)
    found: set[str] = set()  # files recognised (or unchanged): a folder or glob without any says so
    # Files a walk found unrecognizable are in the ledger too (format 'unrecognized'), so a
    # repeat does not sniff them again; forcing a format reads them after all. A file is
    # skipped only if it was read under the format this ingest would read it as (a read under
    # a wrong --input-format does not hide it from a plain ingest).
    ledger = {} if force else read_ledger(store)
    known = None if force else ledger  # every ledger row there is, when it was read
    todo: dict[str, list[tuple[Path, tuple]]] = {}
    unrecognized: list[tuple[Path, tuple]] = []
    starts: dict[str, resume.Start] = {}  # grown files: where to read from
    for p in files:
        was_walked = p in walked
        try:
            st = _stat(p)
        except _NotReadable as e:
            # an empty file holds nothing to lose or misread (a segment a collector opened and
            # never wrote): skipped and said, even when named
            if not was_walked and str(e) != _EMPTY:
                raise KvtraceError(f"{p}: {e}", hint=_NOT_READABLE_HINT if "regular" in str(e) else None) from None
            summary.skipped.append(f"{p}: {e}")
            continue
        was = ledger.get(st, {})
        detected = [f for f, by_flag in was.items() if not by_flag]
        if (
            forced is not None
            and forced.name in was
            or forced is None
            and detected
            and (detected[0] != "unrecognized" or was_walked)
        ):
            summary.files_skipped += 1
            if forced is None and detected[0] == "unrecognized":
                summary.unknown_records["file:unrecognized"] = summary.unknown_records.get("file:unrecognized", 0) + 1
            else:
                found.add(st[0])
            continue
        p = Path(p)
        try:
            name = forced.name if forced else sniff(p)
        except BadTraceInput as e:
            if not was_walked:
                raise
            summary.skipped.append(f"{p}: {e.reason}")
            continue
        except UnknownFormat as e:
            if not was_walked:
                raise
            if e.hint == LFS_HINT:  # the trace is missing, not a stray file: say so each time
                summary.skipped.append(f"{p}: {e.hint}")
                continue
            # e.g. ~/.codex/history.jsonl beside the sessions: not telemetry, not an error
            summary.unknown_records["file:unrecognized"] = summary.unknown_records.get("file:unrecognized", 0) + 1
            unrecognized.append((p, st))
            continue
        if name in was:  # read before under an --input-format that is the detected one
            summary.files_skipped += 1
            found.add(st[0])
            continue
        found.add(st[0])
        todo.setdefault(name, []).append((p, st))
        if not force and FORMATS[name].resumable and not p.name.endswith(".gz"):
            at = resume.point(store, name, st)
            if at is not None:
                starts[st[0]] = at
                summary.files_resumed += 1
    for label, members in groups:
        if not any((m if isinstance(m, str) else os.path.abspath(m)) in found for m in members):
            summary.yielded_nothing.append(
                f"{label}: no file was recognised among its {len(members)} files (see the skipped ones above; "
                f"force a format with --input-format if they are telemetry)"
                if members
                else f"{label}: no .jsonl, .json or .ndjson files (.gz too) in it"
            )
    units = _units(todo, starts)
    total = sum(st[1] for _, group in units for _, st in group)
    # Unrecognized files go into the ledger with the last unit (one transaction less).
    pending = _ledger_rows(unrecognized, "unrecognized", _now(), 0, 0, 0)
    bar = _progress(progress and total > 0)
    with bar, _Reading(bar, total) as reading:
        done = 0
        for i, (fmt_name, group) in enumerate(units):
            summary.files_pending = [str(p) for p, _ in group]
            reading.unit(group, done)
            stored = _ingest_unit(
                store,
                get_format(fmt_name),
                group,
                summary,
                strict,
                pending if i == len(units) - 1 else [],
                known,
                starts,
                forced is not None,
                block_size,
            )
            summary.files_pending = []
            summary.files_stored += stored
            done += sum(st[1] for _, st in group)
            reading.unit([], done)
    if pending and not units:
        with store.transaction():
            _record_files(store, pending, known)


def _now():
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _units(
    todo: dict[str, list[tuple[Path, tuple]]], starts: dict[str, resume.Start]
) -> list[tuple[str, list[tuple[Path, tuple]]]]:
    """Split work into transactions: one per file, or size-capped batches for batch parsers and
    for the small files of a format that reads them together (not those resumed: read alone)."""
    units = []
    for name, group in todo.items():
        if FORMATS[name].batch:
            units += [(name, c) for c in _batches(group, BATCH_BYTES)]
            continue
        small = []
        for item in group:
            if FORMATS[name].small is not None and item[1][1] <= SMALL_FILE_BYTES and item[1][0] not in starts:
                small.append(item)
            else:
                units.append((name, [item]))
        units += [(name, c) for c in _batches(small, SMALL_BATCH_BYTES, SMALL_BATCH_FILES)]
    return units


def _batches(items: list, max_bytes: int, max_files: int | None = None) -> list[list]:
    """Consecutive items in batches closed once they reach ``max_bytes`` (or ``max_files``)."""
    out, cur, size = [], [], 0
    for item in items:
        cur.append(item)
        size += item[1][1]
        if size >= max_bytes or (max_files is not None and len(cur) >= max_files):
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def _ingest_unit(
    store: Store,
    fmt,
    group,
    summary: IngestSummary,
    strict: bool,
    also: list[tuple],
    known: dict | None,
    starts: dict[str, resume.Start],
    forced: bool = False,
    block_size: int | None = None,
) -> int:
    """Parse one unit and merge it in one transaction, with its ledger rows (and ``also``'s).
    ``forced``: read under ``--input-format``; a file that yields nothing then is a warning.
    ``block_size``: given to the parsers of block-hash traces.
    Returns how many of its files are now in the ledger."""
    paths = [p for p, _ in group]
    if fmt.batch:
        parsed: Parsed = fmt.load()(paths)
    elif len(group) > 1:  # small files read together (see _units)
        try:
            parsed = fmt.load(small=True)(paths)
        except Exception:
            parsed = None
        if parsed is None or strict and parsed.rejects:
            # A problem: file by file, as without batching: the files before the bad one are
            # stored, and its error is raised as it would be alone.
            return sum(
                _ingest_unit(
                    store,
                    fmt,
                    [item],
                    summary,
                    strict,
                    also if k == len(group) - 1 else [],
                    known,
                    starts,
                    forced,
                    block_size,
                )
                for k, item in enumerate(group)
            )
    elif group[0][1][0] in starts:
        parsed = fmt.load()(paths[0], start=starts[group[0][1][0]])
    elif fmt.name in BLOCK_FORMATS:  # DuckDB is loaded here: its reader is the faster one
        parsed = fmt.load()(paths[0], block_size=block_size, engine="duckdb")
    else:
        parsed = fmt.load()(paths[0])
    reject_implausible_times(parsed)
    if strict:
        _refuse_rejects(parsed, str(paths[0]))
    barren = _all_rejected(parsed, paths)
    if barren:  # not in the ledger: the next ingest reads it again (and says so again)
        group = [item for item in group if str(item[0]) not in barren]
    now = _now()
    before = (
        summary.requests_added,
        summary.metric_points_added,
        summary.block_requests_added,
        summary.duplicates_skipped,
    )
    # unordered outside the transaction: its RESET must not run inside a failed one (refused there)
    try:
        with store.unordered(), store.transaction():
            _merge(store, parsed, summary)
            added = (
                (summary.requests_added - before[0])
                + (summary.metric_points_added - before[1])
                + (summary.block_requests_added - before[2])
            )
            dups = summary.duplicates_skipped - before[3]
            rows = _ledger_rows(group, fmt.name, now, added, dups, len(parsed.rejects), parsed, forced) + also
            _record_files(store, rows, known)
    except BaseException:
        # rolled back: the summary counts only what is stored
        (
            summary.requests_added,
            summary.metric_points_added,
            summary.block_requests_added,
            summary.duplicates_skipped,
        ) = before
        raise
    _record_rejects(parsed, str(paths[0]), summary)
    summary.yielded_nothing.extend(_barren_message(p, parsed) for p in barren)
    summary.formats[fmt.name] = summary.formats.get(fmt.name, 0) + len(group)
    summary.warnings.extend(parsed.warnings)
    if forced:
        _warn_silent(paths, parsed, fmt.name, summary)
    return len(group)


def _all_rejected(parsed: Parsed, paths: list[Path]) -> set[str]:
    """The files of a unit that had rejected lines and gave no row at all."""
    if not parsed.rejects:
        return set()
    rejected = {r.path or str(paths[0]) for r in parsed.rejects}
    if len(paths) == 1:
        return set() if parsed.tables() else rejected
    return rejected - _files_with_rows(parsed)


def _files_with_rows(parsed: Parsed) -> set[str]:
    """The files of a batch that gave at least one row (a row names its file:line in ``ingested_from``)."""
    import pyarrow.compute as pc

    out: set[str] = set()
    for t in parsed.tables().values():
        out.update(w.rpartition(":")[0] for w in pc.unique(t.column("ingested_from")).to_pylist())
    return out


def _barren_message(path: str, parsed: Parsed) -> str:
    n = sum(1 for r in parsed.rejects if (r.path or path) == path)
    if is_lfs_pointer(Path(path)):
        return f"{path}: nothing stored ({LFS_HINT})"
    first = next(r for r in parsed.rejects if (r.path or path) == path).describe(path)
    return f"{path}: nothing stored, all {n} lines with content were rejected (first: {first})"


def _warn_silent(paths: list[Path], parsed: Parsed, fmt_name: str, summary: IngestSummary) -> None:
    """A warning for each file that gave neither a row, a rejected line nor a counted record
    under a forced format: most likely the wrong one."""
    if parsed.unknown:
        return  # counted records cannot be told apart by file
    if len(paths) == 1:
        heard = {str(paths[0])} if (parsed.tables() or parsed.rejects) else set()
    else:
        heard = _files_with_rows(parsed) | {r.path for r in parsed.rejects}
    for p in paths:
        if str(p) in heard:
            continue
        try:
            seen = f" (it looks like {sniff(p)})"
        except UnknownFormat:
            seen = ""
        summary.warnings.append(
            f"{p}: nothing read as {fmt_name}{seen}; check --input-format, or ingest without it to detect the format"
        )


def _ledger_rows(
    group, fmt_name: str, now, added: int, dups: int, rejected: int, parsed: Parsed | None = None, forced: bool = False
) -> list[tuple]:
    """``ingested_files`` rows of a unit's files; a batch's counts are booked on its first file.
    A parser that can resume a grown file says how far it read (``resume``)."""
    reach = (None, None, None)
    if parsed is not None and parsed.read_to is not None and len(group) == 1:
        reach = (parsed.read_to, parsed.lines_read, parsed.tail_sha256)
    return [
        (st[0], st[1], st[2], fmt_name, now, added, dups, rejected) + reach + (forced,)
        if i == 0
        else (st[0], st[1], st[2], fmt_name, now, 0, 0, 0, None, None, None, forced)
        for i, (_, st) in enumerate(group)
    ]


_LEDGER_COLUMNS = (
    "path",
    "size",
    "mtime_ns",
    "format",
    "ingested_at",
    "rows_added",
    "duplicates",
    "lines_rejected",
    "read_to",
    "lines_read",
    "tail_sha256",
    "forced",
)
# Up to this many ledger rows go in as statement parameters; more as one Arrow table (a batch
# can hold thousands of small transcript files).
_LEDGER_PARAM_ROWS = 64


def _record_files(store: Store, rows: list[tuple], known: dict | None) -> None:
    """One ledger insert per transaction. ``known``: the ledger's keys as read at the start of
    the ingest (None: not read); when none of the rows is there, the insert skips the conflict
    check (a third of its cost)."""
    if not rows:
        return
    insert = f"INSERT INTO ingested_files ({', '.join(_LEDGER_COLUMNS)}) "
    conflicts = known is None or any(row[3] in known.get((row[0], row[1], row[2]), ()) for row in rows)
    on_conflict = " ON CONFLICT DO NOTHING" if conflicts else ""
    if len(rows) <= _LEDGER_PARAM_ROWS:
        values = ", ".join(["(" + ", ".join("?" * len(_LEDGER_COLUMNS)) + ")"] * len(rows))
        store.run(insert + f"VALUES {values}{on_conflict}", [v for row in rows for v in row])
        return
    import pyarrow as pa

    ledger = pa.table({c: [row[k] for row in rows] for k, c in enumerate(_LEDGER_COLUMNS)})
    store.con.register("ledger_in", ledger)
    try:
        store.run(insert + f"SELECT {', '.join(_LEDGER_COLUMNS)} FROM ledger_in{on_conflict}")
    finally:
        store.con.unregister("ledger_in")


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass


def _progress(enabled: bool):
    """A bar of bytes read with an ETA on stderr, only when stderr is a terminal."""
    if not enabled:
        return _NoBar()
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        return _NoBar()
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


class _Reading:
    """Moves the bar within a unit as its files are read, whoever reads them (a parser in
    Python or DuckDB's own readers): a thread samples the read offsets of the process's open
    files (``/proc/self/fdinfo``) a few times a second. A file seen open and then closed counts
    as read whole. Without ``/proc`` (or without a bar) the bar moves per unit.
    """

    INTERVAL_S = 0.2

    def __init__(self, bar, total: int) -> None:
        self.bar = bar
        self.task = bar.add_task("ingest", total=total or 1)
        self.lock = threading.Lock()
        self.files: dict[str, int] = {}  # real path -> size, of the unit being read
        self.read: dict[str, int] = {}  # real path -> furthest offset seen
        self.base = 0  # bytes of the units before
        self.stop = threading.Event()
        self.thread = None
        if not isinstance(bar, _NoBar) and os.path.isdir("/proc/self/fdinfo"):
            self.thread = threading.Thread(target=self._run, name="kvtrace-ingest-progress", daemon=True)

    def __enter__(self) -> "_Reading":
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        return False

    def unit(self, group, done: int) -> None:
        """The unit now read (``[]``: between units), after ``done`` bytes of the ones before."""
        with self.lock:
            self.base = done
            self.read = {}
            self.files = {os.path.realpath(p): st[1] for p, st in group} if self.thread is not None else {}
            self.bar.update(self.task, completed=done)

    def _run(self) -> None:
        while not self.stop.wait(self.INTERVAL_S):
            with self.lock:
                if not self.files:
                    continue
                open_now: dict[str, int] = {}
                try:
                    fds = os.listdir("/proc/self/fd")
                except OSError:
                    return
                for fd in fds:
                    try:
                        target = os.readlink(f"/proc/self/fd/{fd}")
                        if target not in self.files:
                            continue
                        with open(f"/proc/self/fdinfo/{fd}") as fh:
                            pos = int(fh.readline().split()[1])
                    except (OSError, ValueError, IndexError):
                        continue
                    open_now[target] = max(open_now.get(target, 0), pos)
                for path in self.read:
                    if path not in open_now:
                        self.read[path] = self.files[path]  # opened before and closed: read whole
                for path, pos in open_now.items():
                    self.read[path] = max(self.read.get(path, 0), min(pos, self.files[path]))
                self.bar.update(self.task, completed=self.base + sum(self.read.values()))
