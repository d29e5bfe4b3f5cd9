"""The input formats kvtrace reads: names, parsers and sniffing.

Each format names a parser ``module:function``. Parsers are imported only when used, so
``kvtrace ingest`` of transcripts never loads the OTLP protobuf code. A *batch* parser takes a
list of files and reads them in one pass (many small transcript files); the others take one.
"""

from __future__ import annotations

import importlib
import io
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from kvtrace.errors import BadTraceInput, UnknownFormat


@dataclass(frozen=True)
class Format:
    name: str
    parser: str  # "module:function"
    batch: bool  # parser takes list[Path] instead of one Path
    help: str
    resumable: bool = False  # parser(path, start=resume.Start) reads a grown file from there
    # "module:function" reading many small files of a one-file format in one pass (list[Path]
    # -> one Parsed whose rows and rejects name their files)
    small: str | None = None

    def load(self, small: bool = False) -> Callable:
        mod, fn = (self.small if small else self.parser).split(":")
        return getattr(importlib.import_module(mod), fn)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        Format(
            "otlp-json",
            "kvtrace.ingest.otlp_json:parse",
            False,
            "OTLP JSON lines: one Export{Logs,Metrics,Trace}ServiceRequest per line",
            resumable=True,
            small="kvtrace.ingest.otlp_json:parse_small",
        ),
        Format(
            "claude-transcript",
            "kvtrace.ingest.claude_transcripts:parse",
            True,
            "Claude Code transcripts (~/.claude/projects/**/*.jsonl)",
        ),
        Format(
            "codex-rollout",
            "kvtrace.ingest.codex_rollout:parse",
            True,
            "Codex CLI rollout files (~/.codex/sessions/**/rollout-*.jsonl)",
        ),
        Format(
            "gemini-chat",
            "kvtrace.ingest.gemini_chats:parse",
            True,
            "Gemini CLI chat logs (~/.gemini/tmp/*/chats/session-*.json[l])",
        ),
        Format(
            "mooncake",
            "kvtrace.ingest.block_hash:parse_mooncake",
            False,
            "Mooncake block-hash trace JSONL (timestamp ms, input_length, output_length, hash_ids)",
        ),
        Format(
            "bailian",
            "kvtrace.ingest.block_hash:parse_bailian",
            False,
            "Alibaba Bailian block-hash trace JSONL (chat_id, parent_chat_id, timestamp s, turn, hash_ids)",
        ),
    ]
}

# The block-hash trace formats (their parsers take a block_size).
BLOCK_FORMATS = ("mooncake", "bailian")

# Folder walks pick these files; anything else in a folder is ignored.
INGESTIBLE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")


def open_text(path: Path):
    """Open a possibly gzip-compressed input for reading bytes (a ``.gz`` one as
    :class:`GzipSalvage`: every byte before damage comes out first)."""
    return GzipSalvage(path) if path.name.endswith(".gz") else open(path, "rb")


def damage_reason(damage) -> str:
    """The reject reason of a damaged or truncated .gz input (every whole line before it is read)."""
    return f"the gzip stream is damaged or ends early ({damage}); the lines after this point are lost"


def read_whole(path: Path) -> tuple[bytes, str | None]:
    """A whole input's bytes, and what went wrong reading a ``.gz`` one: then the bytes end at
    the last whole line before the damage."""
    if not path.name.endswith(".gz"):
        with open(path, "rb") as fh:
            return fh.read(), None
    with GzipSalvage(path) as fh:
        data = b"".join(fh.pieces())
        if fh.problem:
            return data[: data.rfind(b"\n") + 1], fh.problem
    return data, None


class GzipDamaged(EOFError):
    """A gzip stream that is damaged or ends early, raised once every byte before it was read."""


class GzipSalvage(io.RawIOBase):
    """A gzip file read as far as it can be: a damaged or truncated stream (a cut trailer, half a
    file, a bad block) gives every byte that decompresses before the damage, and only then
    raises :class:`GzipDamaged` (``gzip.GzipFile`` loses what its failing read had decompressed,
    and a stream cut in its 8-byte trailer as a whole). Concatenated members are read in turn.
    Reads go through ``readinto``, which raises at the damage, or ``readline`` and iteration,
    which end there (format detection reads the first lines of a damaged file as of a whole one,
    and its parser reports the damage); ``seek(0)`` starts again."""

    _IN = 1 << 16  # compressed bytes per step
    _OUT = 8 << 20  # decompressed bytes per step at most (a gzip bomb stays bounded)

    def __init__(self, path: Path):
        super().__init__()
        self._f = open(path, "rb")
        self.seek(0)

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset, whence) != (0, 0):
            raise io.UnsupportedOperation("a gzip stream is read from its start")
        self._f.seek(0)
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._tail = b""  # compressed input not yet decompressed (output was bounded)
        self._member = False  # the current member has started
        self._out = b""
        self._at = 0  # bytes of _out already returned
        self._problem: str | None = None
        self._done = False
        return 0

    def close(self) -> None:
        self._f.close()
        super().close()

    @property
    def problem(self) -> str | None:
        """What is wrong with the stream, once read up to it."""
        return self._problem

    def pieces(self):
        """The rest of the decompressed bytes, piece by piece, up to the end or the damage."""
        if self._at < len(self._out):
            yield self._out[self._at :]
        while not self._done:
            self._step()
            if self._out:
                yield self._out
        self._out, self._at = b"", 0

    def readinto(self, b) -> int:
        while self._at == len(self._out) and not self._done:
            self._step()
        n = min(len(b), len(self._out) - self._at)
        if n:
            b[:n] = memoryview(self._out)[self._at : self._at + n]
            self._at += n
            return n
        if self._problem:
            del b  # the traceback keeps this frame: the caller's buffer must not stay exported
            raise GzipDamaged(self._problem)
        return 0

    def readline(self, size: int = -1) -> bytes:
        line = bytearray()
        while size < 0 or len(line) < size:
            while self._at == len(self._out) and not self._done:
                self._step()
            if self._at == len(self._out):
                break
            end = self._out.find(b"\n", self._at)
            stop = len(self._out) if end < 0 else end + 1
            if size >= 0:
                stop = min(stop, self._at + size - len(line))
            line += self._out[self._at : stop]
            self._at = stop
            if line.endswith(b"\n"):
                break
        return bytes(line)

    def _step(self) -> None:
        """Decompress the next bit of input into ``_out``."""
        self._out, self._at = b"", 0
        data = self._tail or self._f.read(self._IN)
        self._tail = b""
        if not data:
            if self._member:
                self._problem = "Compressed file ended before the end-of-stream marker was reached"
            self._done = True
            return
        if not self._member and not data.startswith(b"\x1f\x8b") and not data.strip(b"\0"):
            self._done = True  # zero padding after the last member
            return
        self._member = True
        before = self._d.copy()
        try:
            self._out = self._d.decompress(data, self._OUT)
        except zlib.error as e:
            # Again a byte at a time from before this step: keep what decompresses before the damage.
            d, out = before, bytearray()
            for i in range(len(data)):
                try:
                    out += d.decompress(data[i : i + 1])
                except zlib.error:
                    break
            self._out, self._problem, self._done = bytes(out), str(e), True
            return
        if self._d.eof:  # a member ends: the next one starts in what is left
            self._tail = self._d.unused_data
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            self._member = False
        else:
            self._tail = self._d.unconsumed_tail


# Top-level record types of Codex rollout lines ({"timestamp", "type", "payload"}).
_CODEX_TYPES = {
    "session_meta",
    "turn_context",
    "event_msg",
    "response_item",
    "compacted",
    "token_usage_record",
    "world_state",
}


def block_hash_format(obj: object) -> str | None:
    """The block-hash format of one parsed JSON line: ``"mooncake"``, ``"bailian"`` or None."""
    if not isinstance(obj, dict) or "hash_ids" not in obj:
        return None
    return "bailian" if "chat_id" in obj else "mooncake"


def _classify(obj: object) -> str | None:
    if isinstance(obj, list):
        # Gemini CLI's prompt log (logs.json): an array of {sessionId, messageId, type, message}
        first = obj[0] if obj else None
        if isinstance(first, dict) and "sessionId" in first and "messageId" in first:
            return "gemini-chat"
        return None
    if not isinstance(obj, dict):
        return None
    if obj.get("type") in _CODEX_TYPES and "payload" in obj:
        return "codex-rollout"
    if "instructions" in obj and "id" in obj and "timestamp" in obj and "type" not in obj:
        return "codex-rollout"  # the first line of a 2025 rollout
    if "sessionId" in obj and ("projectHash" in obj or isinstance(obj.get("messages"), list)):
        return "gemini-chat"
    if "$set" in obj and isinstance(obj["$set"], dict):
        return "gemini-chat"
    if any(
        k in obj
        for k in (
            "resourceLogs",
            "resourceMetrics",
            "resourceSpans",
            "resource_logs",
            "resource_metrics",
            "resource_spans",
        )
    ):
        return "otlp-json"
    if "hash_ids" in obj:
        return block_hash_format(obj)
    if "type" in obj and any(k in obj for k in ("sessionId", "uuid", "message", "leafUuid", "messageId")):
        return "claude-transcript"
    return None


# Format detection reads at most this much of a file (a file without line breaks, or a
# decompression bomb, must not be read whole to find out it is not telemetry).
SNIFF_BYTES = 16 << 20
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"
LFS_HINT = "it is a Git LFS pointer, not the trace itself: run `git lfs pull` in its repository, then ingest again"


def is_lfs_pointer(path: Path) -> bool:
    """A Git LFS pointer saved in place of the file (a clone without ``git lfs``)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(_LFS_POINTER)) == _LFS_POINTER
    except OSError:
        return False


def sniff(path: Path, max_lines: int = 50) -> str:
    """Detect a file's format from its first records (reading at most ``SNIFF_BYTES``).

    Raises:
        BadTraceInput: the file cannot be read (permissions, a damaged .gz).
        UnknownFormat: it is read, but is none of the formats.
    """
    try:
        with open_text(path) as fh:
            budget = SNIFF_BYTES
            for i in range(max_lines):
                raw = fh.readline(budget)
                budget -= len(raw)
                if not raw and i == 0 and getattr(fh, "problem", None):
                    # a .gz of which not one byte decompresses: unreadable, not "not telemetry"
                    raise BadTraceInput(path, None, f"cannot read: {fh.problem}")
                if not raw or budget <= 0:
                    break
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                kind = _classify(obj)
                if kind:
                    return kind
        kind = _classify_whole(path)
        if kind:
            return kind
    except (OSError, EOFError) as e:
        raise BadTraceInput(path, None, f"cannot read: {getattr(e, 'strerror', None) or e}") from e
    if is_lfs_pointer(path):
        raise UnknownFormat(f"{path}: not telemetry", hint=LFS_HINT)
    raise UnknownFormat(
        f"{path}: cannot detect the format from its first {max_lines} lines",
        hint="force one with --input-format " + "|".join(FORMATS),
    )


def _classify_whole(path: Path, max_bytes: int = 64 << 20) -> str | None:
    """A file that is one (pretty-printed) JSON document, as older Gemini CLI chat logs are."""
    if not path.name.endswith((".json", ".json.gz")) or path.stat().st_size > max_bytes:
        return None
    with open_text(path) as fh:
        text = fh.read(max_bytes + 1)  # a .gz may expand far beyond its size
        if len(text) > max_bytes:
            return None
        try:
            return _classify(orjson.loads(text))
        except orjson.JSONDecodeError:
            return None


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormat(f"unknown format '{name}'", hint="choose one of " + ", ".join(FORMATS)) from None
