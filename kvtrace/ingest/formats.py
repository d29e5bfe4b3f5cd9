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

    def load(self) -> Callable:
        mod, fn = self.parser.split(":")
        return getattr(importlib.import_module(mod), fn)


FORMATS: dict[str, Format] = {f.name: f for f in [
    Format("otlp-json", "kvtrace.ingest.otlp_json:parse", False,
           "OTLP JSON lines: one Export{Logs,Metrics,Trace}ServiceRequest per line"),
    Format("claude-transcript", "kvtrace.ingest.claude_transcripts:parse", True,
           "Claude Code transcripts (~/.claude/projects/**/*.jsonl)"),
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


def _classify(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return None
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
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise UnknownFormat(f"{path}: cannot read: {e}") from e
    raise UnknownFormat(f"{path}: cannot detect the format from its first {max_lines} lines",
                        hint="force one with --format " + "|".join(FORMATS))


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormat(f"unknown format '{name}'", hint="choose one of " + ", ".join(FORMATS)) from None
