"""A damaged or truncated .gz keeps every whole line before the damage, whatever reads it
(OTLP JSON lines, transcripts, Codex rollouts, block traces), and says so: the same rows as the
whole lines ``zcat`` recovers, ingested as a plain file."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from kvtrace.store import Store

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "otlp": ROOT / "sample_traces" / "otlp" / "logs.jsonl.gz",
    "transcript": next(
        (ROOT / "sample_traces" / "claude" / "projects" / "-Users-dev06-src-data-pipeline").glob("c4eb8f66-*.jsonl.gz")
    ),
    "mooncake": ROOT / "tests" / "fixtures" / "traces" / "mooncake-fast25-conversation" / "conversation_trace.jsonl.gz",
    "codex": next((ROOT / "tests" / "fixtures" / "codex" / "resume" / "sessions").rglob("rollout-*.jsonl")),
}
CUTS = {"trailer": lambda b: b[:-4], "half": lambda b: b[: len(b) // 2], "last_byte": lambda b: b[:-1]}


def _recoverable(blob: bytes) -> bytes:
    """What zcat writes before it gives up, up to its last whole line."""
    out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob)
    return out[: out.rfind(b"\n") + 1]


def _stored(tmp: Path, f: Path):
    with Store(memory=True) as s:
        summary = ingest(s, [f])
        got = (
            s.scalar("SELECT count(*) FROM requests"),
            s.scalar("SELECT coalesce(sum(input_tokens + cache_read_tokens + output_tokens), 0) FROM requests"),
            s.scalar("SELECT count(*) FROM block_requests"),
        )
    return got, summary


# (half of the small rollout ends inside its 21 KB first line: nothing is left to read)
@pytest.mark.parametrize("kind, cut", [(k, c) for k in SOURCES for c in CUTS if (k, c) != ("codex", "half")])
def test_a_damaged_gzip_keeps_every_whole_line_before_the_damage(tmp_path, kind, cut):
    src = SOURCES[kind]
    blob = src.read_bytes() if src.name.endswith(".gz") else gzip.compress(src.read_bytes(), 9, mtime=0)
    name = src.name if src.name.endswith(".gz") else src.name + ".gz"
    damaged = tmp_path / "damaged" / "projects" / "p" / name
    plain = tmp_path / "plain" / "projects" / "p" / name[:-3]
    for d in (damaged, plain):
        d.parent.mkdir(parents=True)
    damaged.write_bytes(CUTS[cut](blob))
    plain.write_bytes(_recoverable(damaged.read_bytes()))
    got, summary = _stored(tmp_path, damaged)
    want, _ = _stored(tmp_path, plain)
    assert got == want and sum(got) > 0
    damage = [r for r in summary.rejects if "gzip" in r]
    assert len(damage) == 1 and damage[0].startswith(f"{damaged}:")
    assert (
        "the gzip stream is damaged or ends early" in damage[0] and "the lines after this point are lost" in damage[0]
    )
    if cut == "trailer":  # only the trailer is gone: every row is there
        whole = tmp_path / "whole" / "projects" / "p" / name
        whole.parent.mkdir(parents=True)
        whole.write_bytes(blob)
        assert got == _stored(tmp_path, whole)[0]


def test_read_whole_gives_every_member_and_stops_at_a_bad_block(tmp_path):
    from kvtrace.ingest.formats import read_whole

    a, b = b"".join(b'{"n": %d}\n' % i for i in range(5000)), b'{"n": "second member"}\n'
    f = tmp_path / "two.jsonl.gz"
    f.write_bytes(gzip.compress(a) + gzip.compress(b) + b"\0" * 64)  # zero padding after
    assert read_whole(f) == (a + b, None)
    blob = bytearray(gzip.compress(a, 1))
    blob[len(blob) // 2] ^= 0x55  # a bad block mid-stream: caught there, or by the CRC
    f.write_bytes(bytes(blob))
    data, damage = read_whole(f)
    assert damage and data.endswith(b"\n")
