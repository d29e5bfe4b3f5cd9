"""The committed Codex, Gemini CLI and GenAI/OpenInference OTLP exports under ``tests/fixtures``
(no tests here): ``CODEX`` and ``GEMINI`` list the capture directories (each with its
``expected.json``), ``GENAI`` the OpenTelemetry SDK spans; ``signal`` finds a directory's logs,
metrics or traces file (plain or gzipped) and ``lines`` reads its non-blank lines."""

from __future__ import annotations

import gzip
from pathlib import Path

FIX = Path(__file__).parent / "fixtures"
CODEX = sorted(p.parent for p in (FIX / "codex").glob("*/expected.json"))
GEMINI = sorted(p.parent for p in (FIX / "gemini").glob("*/expected.json"))
GENAI = FIX / "genai" / "spans"


def signal(d: Path, name: str) -> Path:
    plain = d / f"{name}.jsonl"
    return plain if plain.exists() else d / f"{name}.jsonl.gz"


def lines(d: Path, name: str) -> list[bytes]:
    data = signal(d, name).read_bytes()
    data = gzip.decompress(data) if signal(d, name).name.endswith(".gz") else data
    return [x for x in data.splitlines() if x.strip()]
