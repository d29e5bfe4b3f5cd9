"""Reading a grown file from where its last ingest stopped.

An OTLP JSON lines file that an exporter keeps appending to (the Collector ``file`` exporter,
``opentelemetry-exporter-otlp-json-file``) grows between two ingests; reading it from the start
again costs as much as the first time, and only the merge would keep the old records from
counting twice. The ledger (``ingested_files``) remembers, per read, the byte offset after the
last whole line, the number of lines before it and a fingerprint of the 4 KiB before it. When
the file has the same path and format, is at least that long and still has those 4 KiB there,
it only grew: the parser starts at that offset and numbers lines on from there. Anything else
(a rotated, truncated or rewritten file) is read whole, as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kvtrace.store import Store, load_query

TAIL_BYTES = 4096


def tail_sha256(path: str | Path, read_to: int) -> str:
    """The SHA-256 of the (up to) ``TAIL_BYTES`` bytes before offset ``read_to`` of ``path``."""
    start = max(0, read_to - TAIL_BYTES)
    with open(path, "rb") as fh:
        fh.seek(start)
        return hashlib.sha256(fh.read(read_to - start)).hexdigest()


def point(store: Store, fmt_name: str, st: tuple[str, int, int]) -> tuple[int, int] | None:
    """``(byte offset, line number)`` to resume reading the file of ``st`` (path, size, mtime)
    at, or None to read it whole."""
    row = store.query(load_query("ingest/resume_point").sql, {"path": st[0], "format": fmt_name, "size": st[1]})
    if not row or not row[0][0]:
        return None
    read_to, lines_read, digest = row[0]
    try:
        if tail_sha256(st[0], read_to) != digest:
            return None               # not the bytes that were read: rewritten, not grown
    except OSError:
        return None
    return read_to, lines_read + 1
