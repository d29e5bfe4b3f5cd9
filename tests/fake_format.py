"""A tiny line format for testing the pipeline apart from real parsers: {"key", "minute", "out"}."""

from __future__ import annotations

from pathlib import Path

import orjson

from kvtrace.ingest.base import Parsed, Reject
from kvtrace.ingest.formats import open_text
from tests.builders import request_rows


def parse(path: Path) -> Parsed:
    rows, rejects, n = [], [], 0
    with open_text(path) as fh:
        for i, raw in enumerate(fh, 1):
            n += 1
            try:
                obj = orjson.loads(raw)
                rows.append(
                    dict(
                        request_key=obj["key"],
                        ts=obj["minute"],
                        output_tokens=int(obj["out"]),
                        cache_read_tokens=int(obj.get("read", 0)),
                        ingested_from=f"{path}:{i}",
                    )
                )
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                rejects.append(Reject(i, f"bad line: {e}", field="out" if isinstance(e, ValueError) else None))
    return Parsed(requests=request_rows(*rows) if rows else None, rejects=rejects, lines=n)
