"""Spool segment files: their frame format, names, crash recovery and conversion to OTLP JSON.

A segment moves through these names in the spool folder (each step is an atomic rename, so a
crash leaves every segment in exactly one state)::

    seg-<id>.open        being appended to: frames, fsynced before each acknowledgement
    seg-<id>.sealed      complete frames, waiting to be converted
    seg-<id>.jsonl       plain OTLP JSON lines (one export request per line): what
                         ``kvtrace ingest SPOOL_DIR`` reads; ``.open``/``.sealed`` are ignored by it
    ingested/seg-<id>.jsonl.done   ingested by the collector into its warehouse (kept a while)
    failed/seg-<id>.jsonl      set aside: ingest cannot read its content (the reason is in
                         failed/seg-<id>.error.txt); ``kvtrace ingest SPOOL/failed`` reads it.
                         A conversion or ingest that fails for any other reason (full disk, held
                         lock, server down) leaves the segment where it is and is retried
    failed/seg-<id>.frames     single frames that could not be converted (their segment went on)

A frame is ``b"KV" kind:u8 length:u32 crc32:u32`` (big-endian) + payload; kind ``J`` holds an
OTLP JSON line, ``L``/``M``/``T`` a protobuf logs/metrics/traces request. The CRC lets recovery
tell a complete frame from a torn one: only the unacknowledged tail of an ``.open`` segment can be
torn (every acknowledged frame was written and fsynced first), and recovery cuts it off.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

log = logging.getLogger("kvtrace.collect")

MAGIC = b"KV"
HEADER = struct.Struct(">2sBII")
OPEN, SEALED, READY, TMP, DONE = ".open", ".sealed", ".jsonl", ".jsonl.tmp", ".jsonl.done"
INGESTED_DIR = "ingested"
FAILED_DIR = "failed"  # segments that could not be converted or ingested, kept for a manual retry


def _private(path, flags: int) -> int:
    """``open()``'s opener for spool files: they hold telemetry, so only their owner reads them
    (mode 0600 whatever the umask), as the ``.open`` segments they come from."""
    return os.open(path, flags, 0o600)


def encode_frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, kind, len(payload), zlib.crc32(payload)) + payload


def iter_frames(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(end_offset, kind, payload)`` for every intact frame.

    A damaged frame is skipped by searching for the next magic whose CRC checks, so one bad
    region cannot hide the frames after it.
    """
    pos, n = 0, len(data)
    while pos + HEADER.size <= n:
        magic, kind, length, crc = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if magic == MAGIC and end <= n and zlib.crc32(data[pos + HEADER.size : end]) == crc:
            yield end, kind, data[pos + HEADER.size : end]
            pos = end
            continue
        nxt = data.find(MAGIC, pos + 1)
        if nxt < 0:
            return
        pos = nxt


def new_segment_id(now: datetime | None = None, seq: int = 0) -> str:
    now = now or datetime.now(timezone.utc)
    return f"seg-{now:%Y%m%dT%H%M%S.%f}Z-{seq:06d}"


def segment_id(path: Path) -> str:
    name = path.name
    for suffix in (DONE, TMP, READY, SEALED, OPEN):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_open(path: Path) -> tuple[Path, int, int]:
    """Seal an ``.open`` segment left by a crash: cut the torn tail, fsync, rename to ``.sealed``.

    Returns:
        ``(sealed_path, frames_kept, bytes_cut)``.
    """
    data = path.read_bytes()
    frames, good_end = 0, 0
    for end, _kind, _payload in iter_frames(data):
        frames, good_end = frames + 1, end
    cut = len(data) - good_end
    if cut:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
            fh.flush()
            os.fsync(fh.fileno())
    sealed = path.with_name(segment_id(path) + SEALED)
    os.replace(path, sealed)
    fsync_dir(path.parent)
    return sealed, frames, cut


def convert_sealed(sealed: Path) -> tuple[Path | None, int]:
    """Write a sealed segment's frames as OTLP JSON lines (``.jsonl``), then remove it.

    Crash-safe: the lines go to ``.jsonl.tmp``, which is fsynced and renamed; the ``.sealed``
    file is removed only after that, and a leftover ``.tmp`` is simply rebuilt.

    Returns:
        ``(jsonl_path, lines)``; the path is None when the segment held no records.
    """
    from kvtrace.collect.otlp import JSON_FRAME, SIGNAL_BY_FRAME
    from kvtrace.collect.pbjson import protobuf_to_json_line

    sid = segment_id(sealed)
    ready = sealed.with_name(sid + READY)
    tmp = sealed.with_name(sid + TMP)
    data = sealed.read_bytes()
    lines = 0
    with open(tmp, "wb", opener=_private) as out:
        for _end, kind, payload in iter_frames(data):
            try:
                if kind == JSON_FRAME:
                    line = payload
                elif kind in SIGNAL_BY_FRAME:
                    line = protobuf_to_json_line(SIGNAL_BY_FRAME[kind], payload)
                else:
                    raise ValueError(f"unknown frame kind {kind}")
            except Exception as e:  # noqa: BLE001 - keep the frame aside; the rest of the segment goes on
                kept = _keep_failed_frame(sealed.parent, sid, kind, payload)
                log.warning(
                    "a frame of %s could not be converted (%s: %s); kept in %s", sealed.name, type(e).__name__, e, kept
                )
                continue
            if line:
                out.write(line)
                out.write(b"\n")
                lines += 1
        out.flush()
        os.fsync(out.fileno())
    if not lines:
        tmp.unlink()
        sealed.unlink()
        fsync_dir(sealed.parent)
        return None, 0
    os.replace(tmp, ready)
    fsync_dir(sealed.parent)
    sealed.unlink()
    fsync_dir(sealed.parent)
    return ready, lines


def _keep_failed_frame(spool: Path, sid: str, kind: int, payload: bytes) -> Path:
    """Append a frame that could not be converted to the segment's file of such frames; its path."""
    failed = spool / FAILED_DIR
    failed.mkdir(mode=0o700, exist_ok=True)
    kept = failed / (sid + ".frames")
    with open(kept, "ab", opener=_private) as fh:
        fh.write(encode_frame(kind, payload))
        fh.flush()
        os.fsync(fh.fileno())
    return kept


def tidy(spool: Path) -> None:
    """Remove what a crash can leave half-done: stale ``.tmp`` files and sealed twins of ready
    segments. Segments an earlier kvtrace gave up on (``failed/*.sealed.failed``,
    ``failed/*.jsonl.failed``) go back into the spool to be converted and ingested."""
    for old in sorted((spool / FAILED_DIR).glob("seg-*.failed")):
        name = old.name[: -len(".failed")]
        if name.endswith((SEALED, READY)):
            os.replace(old, spool / name)
            (spool / FAILED_DIR / (name + ".error.txt")).unlink(missing_ok=True)
            fsync_dir(spool)
    for tmp in spool.glob("*" + TMP):
        tmp.unlink(missing_ok=True)
    # Files an earlier kvtrace left readable by everyone (it wrote them under the umask).
    for p in [*spool.glob("seg-*"), *(spool / INGESTED_DIR).glob("seg-*"), *(spool / FAILED_DIR).glob("seg-*")]:
        try:
            if p.stat().st_mode & 0o077:
                p.chmod(0o600)
        except FileNotFoundError:
            pass
    for sealed in spool.glob("*" + SEALED):
        if sealed.with_name(segment_id(sealed) + READY).exists():
            # The .jsonl was renamed into place before the crash; the sealed frames are a duplicate.
            sealed.unlink()


def spool_status(spool: Path) -> dict:
    """What a spool folder holds: segments waiting to be converted or ingested (and the age of the
    oldest: one that stays old is being retried, see the collector's log), ingested ones kept, and
    those set aside with their reasons."""
    import time

    waiting = [p for suffix in (OPEN, SEALED, READY) for p in listing(spool, suffix)]
    ages = []
    for p in waiting:
        try:
            ages.append(time.time() - p.stat().st_mtime)
        except FileNotFoundError:
            pass
    aside = []
    for p in set_aside(spool):
        why = spool / FAILED_DIR / (segment_id(p) + ".error.txt")
        aside.append({"path": str(p), "error": why.read_text().strip() if why.exists() else ""})
    return {
        "spool": str(spool),
        "open": len(listing(spool, OPEN)),
        "sealed": len(listing(spool, SEALED)),
        "ready": len(listing(spool, READY)),
        "oldest_waiting_s": round(max(ages), 1) if ages else None,
        "ingested_kept": len(list((spool / INGESTED_DIR).glob("seg-*" + DONE))),
        "set_aside": aside,
    }


def set_aside(spool: Path) -> list[Path]:
    """Segments set aside in ``failed/`` because ingest cannot read them (see the module doc)."""
    return sorted((spool / FAILED_DIR).glob("seg-*" + READY))


def listing(spool: Path, suffix: str) -> list[Path]:
    """Segments in one state, oldest first (ids sort by time)."""
    return sorted(spool.glob("seg-*" + suffix))  # a glob matches the whole name: .jsonl is not .jsonl.tmp


def write_private(path: Path, text: str) -> None:
    """Write a small text file beside the segments, readable by its owner only."""
    with open(path, "w", encoding="utf-8", opener=_private) as fh:
        fh.write(text)
