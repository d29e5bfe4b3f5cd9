"""The input formats kvtrace reads: names, parsers and sniffing.

Each format names a parser ``module:function``. Parsers are imported only when used, so
``kvtrace ingest`` of transcripts never loads the OTLP protobuf code. A *batch* parser takes a
list of files and reads them in one pass (many small transcript files); the others take one.
"""

from __future__ import annotations

import gzip
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from kvtrace.errors import BadTraceInput, UnknownFormat


@dataclass(frozen=True)
class Format:
    name: str
    parser: str            # "module:function"
    batch: bool            # parser takes list[Path] instead of one Path
    help: str
    resumable: bool = False  # parser(path, start=resume.Start) reads a grown file from there

    def load(self) -> Callable:
        mod, fn = self.parser.split(":")
        return getattr(importlib.import_module(mod), fn)


FORMATS: dict[str, Format] = {f.name: f for f in [
    Format("otlp-json", "kvtrace.ingest.otlp_json:parse", False,
           "OTLP JSON lines: one Export{Logs,Metrics,Trace}ServiceRequest per line", resumable=True),
    Format("claude-transcript", "kvtrace.ingest.claude_transcripts:parse", True,
           "Claude Code transcripts (~/.claude/projects/**/*.jsonl)"),
    Format("codex-rollout", "kvtrace.ingest.codex_rollout:parse", True,
           "Codex CLI rollout files (~/.codex/sessions/**/rollout-*.jsonl)"),
    Format("gemini-chat", "kvtrace.ingest.gemini_chats:parse", True,
           "Gemini CLI chat logs (~/.gemini/tmp/*/chats/session-*.json[l])"),
    Format("mooncake", "kvtrace.ingest.block_hash:parse_mooncake", False,
           "Mooncake block-hash trace JSONL (timestamp ms, input_length, output_length, hash_ids)"),
    Format("bailian", "kvtrace.ingest.block_hash:parse_bailian", False,
           "Alibaba Bailian block-hash trace JSONL (chat_id, parent_chat_id, timestamp s, turn, hash_ids)"),
]}

# Folder walks pick these files; anything else in a folder is ignored.
INGESTIBLE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")


def open_text(path: Path):
    """Open a possibly gzip-compressed input for reading bytes."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


# Top-level record types of Codex rollout lines ({"timestamp", "type", "payload"}).
_CODEX_TYPES = {"session_meta", "turn_context", "event_msg", "response_item", "compacted",
                "token_usage_record", "world_state"}


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
        return "codex-rollout"   # the first line of a 2025 rollout
    if "sessionId" in obj and ("projectHash" in obj or isinstance(obj.get("messages"), list)):
        return "gemini-chat"
    if "$set" in obj and isinstance(obj["$set"], dict):
        return "gemini-chat"
    if any(k in obj for k in ("resourceLogs", "resourceMetrics", "resourceSpans",
                               "resource_logs", "resource_metrics", "resource_spans")):
        return "otlp-json"
    if "hash_ids" in obj:
        return "bailian" if "chat_id" in obj else "mooncake"
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
    raise UnknownFormat(f"{path}: cannot detect the format from its first {max_lines} lines",
                        hint="force one with --format " + "|".join(FORMATS))


def _classify_whole(path: Path, max_bytes: int = 64 << 20) -> str | None:
    """A file that is one (pretty-printed) JSON document, as older Gemini CLI chat logs are."""
    if not path.name.endswith((".json", ".json.gz")) or path.stat().st_size > max_bytes:
        return None
    with open_text(path) as fh:
        text = fh.read(max_bytes + 1)     # a .gz may expand far beyond its size
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
