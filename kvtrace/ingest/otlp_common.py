"""Plumbing shared by the OTLP parsers: input lines as Arrow, and the private DuckDB connection.

The per-record work of OTLP normalization runs in DuckDB (``queries/ingest/otlp_*.sql``), not in
Python loops: a Python loop building columns reaches about a sixth of the speed of merely
parsing the JSON. Python only cuts the input into lines (a zero-copy Arrow string array over
the bytes read) and hands them over in record batches of a few MB, because DuckDB spreads work
over its threads batch by batch: a file of a thousand 400 KB lines given as one batch would
be normalized on one core.
"""

from __future__ import annotations

import mmap
import threading
import zlib

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from kvtrace.ingest.base import Reject, query_source_sql

CHUNK_BYTES = 128 << 20  # lines are read and normalized this much at a time (bounds memory)
BATCH_BYTES = 2 << 20  # an Arrow record batch: the unit DuckDB hands to a thread
BATCH_LINES = 2048


LINES_SCHEMA = pa.schema([("line_no", pa.int64()), ("line", pa.large_string())])


@dataclass
class Lines:
    """One chunk of input lines: an Arrow table ``(line_no, line)`` and what could not be decoded."""

    table: pa.Table
    first: int  # line number of the first line
    count: int  # lines in the chunk
    rejects: list[Reject] = field(default_factory=list)


READ_STEP = 1 << 20
FIRST_PIECE = 8 << 20  # iter_chunks' first piece (reading 128 MB before any work began took 0.15 s)


def iter_chunks(
    fh: BinaryIO, size: int = CHUNK_BYTES, buffers: int = 0, step: int = READ_STEP
) -> Iterator[bytearray | memoryview]:
    """Read ``fh`` in pieces of about ``size`` bytes (the first ones smaller: 8 MB, doubling) that
    end at a line end (except the last).

    Each piece is read straight into a buffer (``readinto``), which the Arrow lines then share:
    only the few bytes after the last newline are copied, to start the next piece.

    Args:
        fh: a binary file.
        size: bytes per piece.
        buffers: 0 gives each piece a buffer of its own (a ``bytearray``). N > 0 reuses N buffers
            in turn and yields ``memoryview`` pieces: a piece is overwritten N pieces later, so
            its consumer must be done with it by then (``prefetch`` + one piece at a time needs
            2). Fresh buffers cost the kernel a zeroed page per 4 KiB: 0.26 s of CPU per 457 MB
            read, against 0.08 s with reuse (measured).
        step: bytes per ``readinto``. Small for a gzip stream, which loses what a failing call
            had decompressed; a whole piece for a plain file, since a reading thread takes the
            GIL back after every call (1 MiB steps slowed the main thread's line cutting 6x).
    """
    pool: dict[int, mmap.mmap] = {}
    turn = 0
    carry = b""
    piece = min(size, FIRST_PIECE)  # doubling up to size: the first piece's consumer starts soon
    while True:
        need = len(carry) + piece
        piece = min(piece * 2, size)
        slot = turn % buffers if buffers else 0
        if not buffers:
            buf = bytearray(need)
        elif slot in pool and len(pool[slot]) >= need:
            buf = pool[slot]
        else:
            # Anonymous memory is zeroed page by page as it is first written, so the small first
            # pieces touch only what they use. Never resized in place: an old piece may still be
            # exported.
            buf = mmap.mmap(-1, max(need, size + READ_STEP))
            pool[slot] = buf
        buf[: len(carry)] = carry
        got = len(carry)
        while got < need:
            try:
                n = fh.readinto(memoryview(buf)[got : min(got + step, need)])
            except (EOFError, OSError, zlib.error):
                cut = buf.rfind(b"\n", 0, got)
                if cut >= 0:  # keep the whole lines read so far
                    yield _piece(buf, cut + 1, buffers)
                raise
            if not n:
                break
            got += n
        if got < need:  # end of input
            if got:
                yield _piece(buf, got, buffers)
            return
        cut = buf.rfind(b"\n", 0, need)
        if cut < 0:  # one line longer than a piece: read on
            carry = bytes(memoryview(buf)[:need])
            continue
        carry = bytes(memoryview(buf)[cut + 1 : need])
        turn += 1  # the next piece goes to the next buffer
        yield _piece(buf, cut + 1, buffers)


def _piece(buf: bytearray | mmap.mmap, n: int, shared: int) -> bytearray | memoryview:
    if shared:
        return memoryview(buf)[:n]
    del buf[n:]
    return buf


def prefetch(items: Iterator) -> Iterator:
    """Yield from ``items``, producing the next one in a background thread meanwhile, so that
    reading (and gunzipping) the next piece overlaps DuckDB's work on this one."""
    from concurrent.futures import ThreadPoolExecutor

    done = object()
    with ThreadPoolExecutor(1, thread_name_prefix="kvtrace-read") as pool:
        pending = pool.submit(next, items, done)
        while (item := pending.result()) is not done:
            pending = pool.submit(next, items, done)
            yield item


def join_lines(lines: Iterable[bytes | str]) -> bytes:
    """In-memory lines (with or without their newline) as one newline-separated buffer."""
    out = []
    for line in lines:
        b = line.encode() if isinstance(line, str) else bytes(line)
        out.append(b if b.endswith(b"\n") else b + b"\n")
    return b"".join(out)


def searchable(data: bytes | bytearray | memoryview) -> tuple[bytes | bytearray | mmap.mmap, int]:
    """``(object with find/rfind, end)`` for a piece: a memoryview piece (shared buffers) is
    searched in its buffer, which starts where the piece does."""
    return (data.obj, data.nbytes) if isinstance(data, memoryview) else (data, len(data))


def _line_starts(data: bytes | bytearray) -> np.ndarray:
    """Offsets of every line start plus ``len(data)``: the Arrow offsets of the line array."""
    # Long lines (batched exports): a find() per line is cheapest. Many short lines: a
    # vectorized scan, which costs a pass over the bytes whatever their number.
    base, end = searchable(data)
    starts, pos, find = [], 0, base.find
    while (i := find(b"\n", pos, end)) >= 0:
        pos = i + 1
        starts.append(pos)
        if len(starts) > 20_000:
            starts = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
            break
    starts = np.asarray(starts, dtype=np.int64)
    if len(starts) and starts[-1] == len(data):
        starts = starts[:-1]  # the final newline does not start a line
    return np.concatenate([[0], starts, [len(data)]]).astype(np.int64)


def lines_table(data: bytes | bytearray, first: int) -> Lines:
    """Cut ``data`` into lines numbered from ``first``, as Arrow strings sharing ``data``'s memory.

    Each line keeps its trailing newline (JSON whitespace). Lines that are not UTF-8 are
    rejected here and replaced by blanks, since DuckDB refuses a whole batch with one of them.
    """
    if not data:
        return Lines(LINES_SCHEMA.empty_table(), first, 0)
    offsets = _line_starts(data)
    n = len(offsets) - 1
    rejects: list[Reject] = []
    arr = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        data, rejects = _blank_non_utf8(data, offsets, first)
        offsets = _line_starts(data)
        arr = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    line_no = pa.array(np.arange(first, first + n, dtype=np.int64))
    batches = []
    for lo, hi in _batch_bounds(offsets):
        batches.append(
            pa.RecordBatch.from_arrays([line_no.slice(lo, hi - lo), arr.slice(lo, hi - lo)], names=["line_no", "line"])
        )
    return Lines(pa.Table.from_batches(batches), first, n, rejects)


def _batch_bounds(offsets: np.ndarray) -> Iterator[tuple[int, int]]:
    n = len(offsets) - 1
    lo = 0
    while lo < n:
        # the first line whose end passes the byte budget closes the batch
        hi = int(np.searchsorted(offsets, offsets[lo] + BATCH_BYTES, side="left"))
        hi = max(lo + 1, min(hi, lo + BATCH_LINES, n))
        yield lo, hi
        lo = hi


def _blank_non_utf8(data: bytes | bytearray, offsets: np.ndarray, first: int) -> tuple[bytes, list[Reject]]:
    rejects, parts = [], []
    for i in range(len(offsets) - 1):
        line = bytes(data[offsets[i] : offsets[i + 1]])
        try:
            line.decode("utf-8")
            parts.append(line)
        except UnicodeDecodeError as e:
            rejects.append(Reject(first + i, f"not UTF-8 text (byte {e.start + 1} of the line)"))
            parts.append(b"\n" if line.endswith(b"\n") else b" ")  # keep the line count
    return b"".join(parts), rejects


_local = threading.local()


@contextmanager
def connection() -> Iterator:
    """The thread's private in-memory DuckDB with the OTLP macros, for one parse.

    Made once per thread and kept: starting one costs 20-30 ms and closing one after a large
    parse 40-80 ms, against a few ms to drop the parse's temp tables (measured), which matters to
    the collector's many small segments and to any one-file ingest. After a failure the
    connection is closed and the next parse starts a new one.
    """
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = new_connection()
    try:
        yield con
    except BaseException:
        _local.con = None
        con.close()
        raise
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall():
        con.execute(f'DROP TABLE "{name}"')


# After a parse of more than this much input, the thread's connection is closed (off the
# caller's path): a kept one holds on to 110-140 MB after a large parse (measured), which a
# long-running collector or server should not carry for its next small segment.
KEEP_BYTES = 64 << 20


def retire_connection() -> None:
    """Close the thread's kept connection in a background thread; the next parse makes a new one."""
    con = _local.__dict__.pop("con", None)
    if con is not None:
        threading.Thread(target=con.close, name="kvtrace-close").start()


def new_connection():
    """A private in-memory DuckDB with the OTLP macros and ingest's settings; the parsers never touch
    the warehouse."""
    import duckdb

    from kvtrace.store import load_query

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")  # rows carry their line numbers
    con.execute("SET enable_progress_bar = false")  # the CLI draws its own
    con.execute(f"CREATE OR REPLACE MACRO otlp_qs(x) AS {query_source_sql('x')}")
    con.execute(load_query("ingest/otlp_macros").sql)
    # request keys and disjoint buckets of the other agents' records (otlp_agents_*, otlp_genai_spans)
    con.execute(load_query("ingest/agent_macros").sql)
    return con
