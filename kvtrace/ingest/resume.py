"""Reading a grown file from where its last ingest stopped.

An OTLP JSON lines file that an exporter keeps appending to (the Collector ``file`` exporter,
``opentelemetry-exporter-otlp-json-file``) grows between two ingests; reading it from the start
again costs as much as the first time, and only the merge would keep the old records from
counting twice. The ledger (``ingested_files``) remembers, per read, the byte offset after the
last whole line, the number of lines before it and a fingerprint of the 4 KiB before it. When
the file has the same path and format, is at least that long and still has those 4 KiB there,
it only grew: the parser starts at that offset and numbers lines on from there. Anything else
(a rotated or truncated file, or one rewritten where those 4 KiB were) is read whole, as before.
The fingerprint is taken from the bytes the parser read, never from the file afterwards (it may
have been rotated in between). An edit further back in a file that then grew goes unseen: log
files are appended to, not edited.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from kvtrace.store import Store, load_query

TAIL_BYTES = 4096


class Start(NamedTuple):
    """Where to resume: the byte offset (the start of a line), its line number, and the (up to)
    ``TAIL_BYTES`` bytes before it, as checked, which begin the new read's own fingerprint."""

    offset: int
    line: int
    before: bytes


def fingerprint(tail: bytes) -> str:
    """The ledger's ``tail_sha256`` of the (up to) ``TAIL_BYTES`` bytes before ``read_to``."""
    return hashlib.sha256(tail[-TAIL_BYTES:]).hexdigest()


def point(store: Store, fmt_name: str, st: tuple[str, int, int]) -> Start | None:
    """Where to resume reading the file of ``st`` (path, size, mtime), or None to read it whole."""
    row = store.query(load_query("ingest/resume_point").sql, {"path": st[0], "format": fmt_name, "size": st[1]})
    if not row or not row[0][0]:
        return None
    read_to, lines_read, digest = row[0]
    at = max(0, read_to - TAIL_BYTES)
    try:
        with open(st[0], "rb") as fh:
            fh.seek(at)
            before = fh.read(read_to - at)
    except OSError:
        return None
    if fingerprint(before) != digest:
        return None  # not the bytes that were read: rewritten, not grown
    return Start(read_to, lines_read + 1, before)
