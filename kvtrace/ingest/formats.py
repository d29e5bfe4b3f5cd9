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

from kvtrace.errors import UnknownFormat


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


def sniff(path: Path, max_lines: int = 50) -> str:
    """Detect a file's format from its first records."""
    try:
        with open_text(path) as fh:
            for i, raw in enumerate(fh):
                if i >= max_lines:
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
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise UnknownFormat(f"{path}: cannot read: {e}") from e
    raise UnknownFormat(f"{path}: cannot detect the format from its first {max_lines} lines",
                        hint="force one with --format " + "|".join(FORMATS))


def _classify_whole(path: Path, max_bytes: int = 64 << 20) -> str | None:
    """A file that is one (pretty-printed) JSON document, as older Gemini CLI chat logs are."""
    if not path.name.endswith((".json", ".json.gz")) or path.stat().st_size > max_bytes:
        return None
    with open_text(path) as fh:
        try:
            return _classify(orjson.loads(fh.read()))
        except orjson.JSONDecodeError:
            return None


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormat(f"unknown format '{name}'", hint="choose one of " + ", ".join(FORMATS)) from None
