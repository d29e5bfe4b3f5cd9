"""OTLP JSON lines: one ``Export{Logs,Metrics,Trace}ServiceRequest`` per line.

This is what the OpenTelemetry Collector ``file`` exporter, ``opentelemetry-exporter-otlp-json-file``
and ``kvtrace collect``'s spool write. From Claude Code's telemetry it reads:

- ``claude_code.api_request`` log events: one ``requests`` row each, keyed by ``request_id``
  (else a hash of the normalized record, so a re-sent record still de-duplicates);
- ``claude_code.token.usage`` metric points: ``metric_points`` rows with their temporality,
  which the warehouse uses only for sessions without request rows;
- ``claude_code.llm_request`` spans (traces beta): request rows under the same key as the
  event of the same request, so the two merge instead of counting twice.

Everything else is counted in ``Parsed.unknown`` by kind (``event:user_prompt``,
``metric:claude_code.cost.usage``, ``span:claude_code.tool``, ``log:<name>``). A line that is
not valid JSON or not an export request, and a record whose token count is not a number, is a
``Reject`` naming the line and the field; the rest of the input is still read.

The normalization is SQL (``queries/ingest/otlp_*.sql``) run by a private in-memory DuckDB
(one per thread, kept between parses) over the lines; see ``kvtrace.ingest.otlp_common`` for why.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from kvtrace.ingest.base import METRIC_POINT_SCHEMA, REQUEST_SCHEMA, Parsed, Reject, arrow_as
from kvtrace.ingest.formats import GzipDamaged, damage_reason, open_text, read_whole
from kvtrace.ingest.otlp_common import (
    CHUNK_BYTES,
    KEEP_BYTES,
    READ_STEP,
    Lines,
    connection,
    iter_chunks,
    join_lines,
    lines_table,
    prefetch,
    retire_connection,
    searchable,
)
from kvtrace.ingest.resume import TAIL_BYTES, Start, fingerprint
from kvtrace.store import load_query

# (bit in otlp_line_class.signals, normalization query, the temp table its rows go to, and the
# table whose kind-NULL rows mark its lines, if not the signal bit). A query runs only on chunks
# with lines for it: planning one on no lines took 15-40 ms (measured), five of them most of the
# parse of a collector's small segment.
# otlp_logs marks the lines with a Codex or Gemini CLI event for otlp_agents_logs, so a Claude
# Code file is not searched again; the other agents' metrics and spans have their own queries.
_SIGNALS = (
    (1, "ingest/otlp_logs", "otlp_log_rows", None),
    (2, "ingest/otlp_metrics", "otlp_metric_rows", None),
    (4, "ingest/otlp_spans", "otlp_span_rows", None),
    (1, "ingest/otlp_agents_logs", "otlp_agent_log_rows", "otlp_log_rows"),
    (2, "ingest/otlp_agents_metrics", "otlp_agent_metric_rows", None),
    (4, "ingest/otlp_genai_spans", "otlp_genai_span_rows", None),
)
_REQUEST_TABLES = {"otlp_log_rows", "otlp_span_rows", "otlp_agent_log_rows", "otlp_genai_span_rows"}
_POINT_TABLES = {"otlp_metric_rows", "otlp_agent_metric_rows"}


def parse(path: Path, start: Start | None = None) -> Parsed:
    """Parse an OTLP JSON lines file (``.gz`` too).

    Args:
        path: the file.
        start: where an earlier parse of a file that has since grown stopped
            (``kvtrace.ingest.resume.point``): the parse reads from there and numbers lines on.
            Plain files only.

    Returns:
        A :class:`Parsed` with ``requests`` and ``metric_points``; provenance is ``path:line``;
        ``read_to``, ``lines_read`` and ``tail_sha256`` say how far it read.
    """
    path = Path(path)
    start = start or Start(0, 1, b"")
    compressed = path.name.endswith(".gz")
    if start.offset and compressed:
        raise ValueError("a gzip file is read from its start")
    with open_text(path) as fh:
        fh.seek(start.offset)
        parsed = _parse(_read(fh, compressed), str(path), read_ahead=True, first=start.line, before=start.before)
    parsed.read_to += start.offset
    return parsed


def parse_lines(data: bytes | Iterable[bytes | str], origin: str) -> Parsed:
    """Parse OTLP JSON lines held in memory (the collector's accepted batches).

    Args:
        data: newline-separated export requests, or an iterable of lines.
        origin: what provenance names instead of a file (rows get ``origin:line``).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = join_lines(data)
    return _parse(iter([(bytes(data), None)]), origin)


def parse_small(paths: list[Path]) -> Parsed:
    """Parse many small OTLP JSON lines files in one pass: their lines are parsed as one input
    (a parse has a fixed cost of about 0.1 s, more than a small file's lines), then each row and
    reject is given back to its file and line. A file whose last line is not ended (still being
    written) is parsed on its own, as ``parse`` would. The files are read whole: no resume point.
    """
    paths = [Path(p) for p in paths]
    rejects: list[Reject] = []
    datas: list[bytes] = []
    names: list[str] = []
    firsts: list[int] = []  # each file's first line in the joined input
    alone: list[Parsed] = []
    line = 1
    for p in paths:
        try:
            data, damage = read_whole(p)
        except OSError as e:
            rejects.append(Reject(None, f"cannot read: {e}", path=str(p)))
            continue
        if damage:
            rejects.append(Reject(data.count(b"\n") + 1, damage_reason(damage), path=str(p)))
        if data and not data.endswith(b"\n"):
            one = parse(p)
            for r in one.rejects:
                rejects.append(r if r.path else Reject(r.line, r.reason, field=r.field, path=str(p)))
            one.rejects = []
            alone.append(one)
            continue
        datas.append(data)
        names.append(str(p))
        firsts.append(line)
        line += data.count(b"\n")
    joined = _parse(iter([(b"".join(datas), None)]), "") if datas else Parsed()

    def where(n: int) -> tuple[str, int]:
        k = bisect.bisect_right(firsts, n) - 1
        return names[k], n - firsts[k] + 1

    for r in joined.rejects:
        if r.line is not None and firsts:
            path, n = where(r.line)
            rejects.append(Reject(n, r.reason, field=r.field, path=path))
        else:
            rejects.append(r)
    out = Parsed(
        rejects=sorted(rejects, key=lambda r: (r.path or "", r.line or 0)),
        lines=joined.lines + sum(a.lines for a in alone),
    )
    for part in [joined, *alone]:
        out.unknown.update(dict(sorted(part.unknown.items())))  # the query's order varies
    for name, schema in (("requests", REQUEST_SCHEMA), ("metric_points", METRIC_POINT_SCHEMA)):
        tables = [t for t in [getattr(joined, name)] if t is not None and t.num_rows]
        if tables:
            t = tables[0]
            origins = [":".join(map(str, where(int(w[1:])))) for w in t.column("ingested_from").to_pylist()]
            tables[0] = t.set_column(
                t.schema.get_field_index("ingested_from"), "ingested_from", pa.array(origins, pa.string())
            )
        tables += [t for a in alone if (t := getattr(a, name)) is not None and t.num_rows]
        setattr(out, name, pa.concat_tables(tables) if tables else schema.empty_table())
    return out


def _read(fh, compressed: bool) -> Iterator[tuple[bytes | bytearray, str | None]]:
    """Chunks of whole lines; a gzip stream that ends early yields what it had and says so.
    Pieces of ``CHUNK_BYTES`` in two buffers in turn: ``_parse`` is done with a piece before the
    reading thread fills the one after next."""
    try:
        # a plain file is read a whole piece per call (see iter_chunks' step)
        for chunk in iter_chunks(fh, CHUNK_BYTES, buffers=2, step=READ_STEP if compressed else 1 << 62):
            yield chunk, None
    except GzipDamaged as e:
        # every whole line before the damage was yielded (see GzipSalvage)
        yield b"", damage_reason(e)


class _Piece(NamedTuple):
    """A chunk as numbered lines, and what the parse needs to know of it."""

    lines: Lines | None
    problem: str | None  # what went wrong reading it (a damaged gzip stream)
    newline_end: bool
    whole: int  # bytes of its whole lines: all of it unless the last line is torn
    whole_tail: bytes  # the last TAIL_BYTES of those


def _pieces(chunks: Iterator[tuple[bytes | bytearray | memoryview, str | None]], first: int = 1) -> Iterator[_Piece]:
    """Each chunk as a :class:`_Piece`, its lines numbered from ``first`` on."""
    for data, problem in chunks:
        lines = lines_table(data, first) if data else None
        if lines is not None:
            first += lines.count
        newline_end = data[-1:] == b"\n"
        base, end = searchable(data)
        whole = end if newline_end else base.rfind(b"\n", 0, end) + 1
        yield _Piece(lines, problem, newline_end, whole, bytes(data[max(0, whole - TAIL_BYTES) : whole]))


@dataclass
class _Book:
    """What the pieces read so far add up to."""

    first: int  # the next line's number
    tail: bytes  # the last TAIL_BYTES of whole lines
    whole_bytes: int = 0
    ends_with_newline: bool = True
    problems: list[Reject] = field(default_factory=list)

    def add(self, piece: _Piece) -> Lines | None:
        if piece.problem:
            self.problems.append(Reject(self.first, piece.problem))
        if piece.lines is None:
            return None
        self.problems.extend(piece.lines.rejects)
        self.first += piece.lines.count
        self.whole_bytes += piece.whole
        self.tail = (self.tail + piece.whole_tail)[-TAIL_BYTES:]
        self.ends_with_newline = piece.newline_end
        return piece.lines


def _parse(
    chunks: Iterator[tuple[bytes | bytearray | memoryview, str | None]],
    origin: str,
    read_ahead: bool = False,
    first: int = 1,
    before: bytes = b"",
) -> Parsed:
    """Parse chunks of lines, piece by piece, on this thread's connection."""
    with connection() as con:
        parsed = _parse_pieces(con, chunks, origin, read_ahead, first, before)
    if parsed.read_to > KEEP_BYTES:
        retire_connection()
    return parsed


def _parse_pieces(con, chunks, origin: str, read_ahead: bool, first: int, before: bytes) -> Parsed:
    # read_ahead: the next chunk is read and cut into lines in a thread while DuckDB normalizes
    # this one. Cutting lines there, not here, matters: a Python loop beside a running read
    # was 6x slower (measured), while DuckDB lets the GIL go.
    pieces = prefetch(_pieces(chunks, first)) if read_ahead else _pieces(chunks, first)
    book = _Book(first, before)
    try:
        parsed = Parsed()
        made: set[str] = set()
        for piece in pieces:
            lines = book.add(piece)
            if lines is not None:
                _normalize(con, lines, made)
        parsed.lines = book.first - first
        # how far whole lines go: a torn last line is read again once the file has grown
        parsed.read_to, parsed.lines_read = book.whole_bytes, book.first - 1 - (not book.ends_with_newline)
        parsed.tail_sha256 = fingerprint(book.tail)
        if parsed.lines == 0:
            parsed.rejects = book.problems
            return parsed
        any_requests, any_points = _finish(con, made)
        torn = None if book.ends_with_newline else book.first - 1
        parsed.rejects = sorted(book.problems + _rejects(con, torn), key=lambda r: r.line or 0)
        parsed.unknown = Counter({k: int(n) for k, n in con.execute(load_query("ingest/otlp_unknown").sql).fetchall()})
        params = {"origin": origin}
        parsed.requests = (
            arrow_as(con.sql(load_query("ingest/otlp_requests").sql, params=params), REQUEST_SCHEMA)
            if any_requests
            else REQUEST_SCHEMA.empty_table()
        )
        parsed.metric_points = (
            arrow_as(con.sql(load_query("ingest/otlp_points").sql, params=params), METRIC_POINT_SCHEMA)
            if any_points
            else METRIC_POINT_SCHEMA.empty_table()
        )
    finally:
        if hasattr(pieces, "close"):
            pieces.close()  # a read ahead in flight ends with the parse
    return parsed


def _normalize(con, lines, made: set[str]) -> None:
    """Classify a chunk's lines, then normalize the lines of each signal; rows go to temp tables.

    ``made`` holds the temp tables created so far: a query runs only on a chunk with lines for
    it (``_finish`` gives the tables of signals never seen an empty stand-in).
    """
    import numpy as np

    con.register("otlp_lines", lines.table)
    _into(con, "otlp_line_class", load_query("ingest/otlp_lines").sql, made)
    cls = con.execute("SELECT line_no, signals FROM otlp_line_class WHERE line_no >= ?", [lines.first]).fetchnumpy()
    signals = np.zeros(lines.count, dtype=np.int64)
    signals[cls["line_no"] - lines.first] = cls["signals"]
    for bit, query, table, marked_in in _SIGNALS:
        if marked_in is None:
            mask = (signals & bit) != 0
        else:
            mask = np.zeros(lines.count, dtype=bool)
            if marked_in in made:
                marked = con.execute(
                    f"SELECT DISTINCT line_no FROM {marked_in} WHERE kind IS NULL AND line_no >= ?", [lines.first]
                ).fetchnumpy()["line_no"]
                mask[np.asarray(marked, dtype=np.int64) - lines.first] = True
        if not mask.any():
            continue
        con.register("otlp_lines", lines.table if mask.all() else lines.table.filter(pa.array(mask)))
        _into(con, table, load_query(query).sql, made)
    con.unregister("otlp_lines")


def _finish(con, made: set[str]) -> tuple[bool, bool]:
    """Give each signal table never created an empty stand-in with the columns the final queries
    name; returns whether any request table and any metric point table was really made."""
    for table in ("otlp_line_class",) + tuple(t for _, _, t, _ in _SIGNALS):
        if table not in made:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {load_query('ingest/otlp_no_rows').sql}")
    return bool(made & _REQUEST_TABLES), bool(made & _POINT_TABLES)


def _into(con, table: str, select: str, made: set[str]) -> None:
    if table in made:
        con.execute(f"INSERT INTO {table} {select}")
    else:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {select}")
        made.add(table)


def _rejects(con, torn_line: int | None) -> list[Reject]:
    out = []
    for line, reason, fld in con.execute(load_query("ingest/otlp_rejects").sql).fetchall():
        if line == torn_line and reason == "invalid JSON":
            reason = "invalid JSON: the last line is torn (no newline at the end; was a writer interrupted?)"
        out.append(Reject(int(line), reason, fld))
    return out
