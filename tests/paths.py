"""Where the suite finds committed public traces (``tests/fixtures/traces``, with their licence)."""

import gzip
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "fixtures" / "traces"
CONVERSATION = TRACES / "mooncake-fast25-conversation" / "conversation_trace.jsonl.gz"
SYNTHETIC = TRACES / "mooncake-fast25-synthetic" / "synthetic_trace.jsonl.gz"


def raw(path: Path) -> bytes:
    """The bytes of a committed trace as published (decompressed)."""
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
