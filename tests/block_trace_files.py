"""Block-hash trace files for the tests (no tests here): ``BAILIAN_LINES``, four records of a
Bailian (Alibaba) trace, a three-turn chat whose turns extend each other's blocks and one search
request; ``write_lines``, which writes records (or raw lines) as a JSON lines file, gzipped when
the name ends in ``.gz``."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

BAILIAN_LINES = [
    {
        "chat_id": 1,
        "parent_chat_id": -1,
        "timestamp": 0.5,
        "input_length": 40,
        "output_length": 7,
        "type": "text",
        "turn": 1,
        "hash_ids": [10, 11, 12],
    },
    {
        "chat_id": 2,
        "parent_chat_id": -1,
        "timestamp": 1.25,
        "input_length": 20,
        "output_length": 3,
        "type": "search",
        "turn": 1,
        "hash_ids": [20, 21],
    },
    {
        "chat_id": 3,
        "parent_chat_id": 1,
        "timestamp": 61.0,
        "input_length": 70,
        "output_length": 9,
        "type": "text",
        "turn": 2,
        "hash_ids": [10, 11, 12, 13, 14],
    },
    {
        "chat_id": 4,
        "parent_chat_id": 3,
        "timestamp": 90.0,
        "input_length": 90,
        "output_length": 9,
        "type": "text",
        "turn": 3,
        "hash_ids": [10, 11, 12, 13, 14, 15],
    },
]


def write_lines(path: Path, lines: list, raw: bool = False) -> Path:
    data = "\n".join(x if raw else orjson.dumps(x).decode() for x in lines) + "\n"
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data.encode(), mtime=0))
    else:
        path.write_text(data)
    return path
