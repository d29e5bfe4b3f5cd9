"""Report dicts for the HTML, chart and schedule tests.

``week_rows``/``load_rows`` put seeded requests into a warehouse through the ingest merge; the
reuse sections (``ttl``, ``reuse``, ``spend``) then come from the real analyses via
``build_report(..., ttls=...)``; ``with_tiers`` adds a ``tiers`` section in the shape that
docs/report-schema.md documents, so every chart has its data.
"""

from __future__ import annotations

import datetime as dt
import random
import struct
import zlib
from contextlib import contextmanager

from kvtrace.ingest.pipeline import IngestSummary, _merge
from tests.builders import parsed

T0 = dt.datetime(2026, 11, 2, 0, 0)


def week_rows(
    days: int = 7, per_day: int = 40, seed: int = 7, start: dt.datetime = T0, prefix: str = "r"
) -> list[dict]:
    """Requests spread over ``days`` UTC days from ``start``; seeded."""
    rng = random.Random(seed)
    rows = []
    for day in range(days):
        for i in range(per_day):
            ts = start + dt.timedelta(days=day, seconds=rng.randint(0, 86399))
            rows.append(
                dict(
                    request_key=f"{prefix}{day}-{i}",
                    ts=ts,
                    session_id=f"s{day}-{i % 5}",
                    model=rng.choice(["claude-sonnet-4-6", "claude-opus-4-6"]),
                    cache_read_tokens=rng.randint(20_000, 60_000),
                    cache_write_5m_tokens=rng.randint(0, 900),
                    cache_write_1h_tokens=rng.choice([0, 0, rng.randint(0, 400)]),
                    output_tokens=rng.randint(40, 400),
                    input_tokens=rng.randint(0, 12),
                )
            )
    return rows


@contextmanager
def week_store(path=None):
    """A warehouse (in memory, or the file ``path``) holding the synthetic week (``week_rows``)."""
    from kvtrace.store import Store

    with Store(memory=True) if path is None else Store(path) as s:
        load_rows(s, week_rows())
        yield s


def load_rows(store, rows: list[dict]) -> None:
    with store.transaction():
        _merge(store, parsed(*rows), IngestSummary())


def fake_tiers() -> dict:
    """A ``tiers`` section in the shape docs/report-schema.md proposes for the tier replay."""
    caps = [10 ** (4 + k / 4) for k in range(17)]
    ttls = (300.0, 3600.0, None)
    return {
        "grid": [
            {
                "capacity_tokens": c,
                "ttl_s": t,
                "hit_ratio_tokens": min(0.97, 0.05 + 0.05 * i) * (0.9 if t == 300 else 1),
                "hit_ratio_blocks": min(0.96, 0.05 + 0.05 * i),
            }
            for t in ttls
            for i, c in enumerate(caps)
        ],
        "tiers": [
            {
                "name": "HBM",
                "capacity_tokens": 2.0e4,
                "capacity_bytes": 2.0e4 * 126976,
                "hit_ratio_tokens": 0.6,
                "write_bytes_per_s_mean": 2.1e9,
                "write_bytes_per_s_peak": 5.0e9,
            },
            {
                "name": "DRAM",
                "capacity_tokens": 6.0e4,
                "capacity_bytes": 6.0e4 * 126976,
                "hit_ratio_tokens": 0.25,
                "write_bytes_per_s_mean": 1.2e9,
                "write_bytes_per_s_peak": 3.1e9,
                "fills_at": "2026-11-02T00:45:00Z",
            },
            {
                "name": "NVMe",
                "capacity_tokens": 8.0e8,
                "capacity_bytes": 8.0e8 * 126976,
                "hit_ratio_tokens": 0.08,
                "write_bytes_per_s_mean": 0.9e9,
                "write_bytes_per_s_peak": 1.9e9,
                "dwpd_per_drive": 3.2,
                "dwpd_rating": 1.0,
            },
        ],
        "ttft": {
            "continuing": {"p50_ms": 180.0, "p90_ms": 420.0, "p99_ms": 900.0, "max_ms": 2100.0},
            "resumed": {"p50_ms": 950.0, "p90_ms": 2600.0, "p99_ms": 7000.0, "max_ms": 12000.0},
        },
    }


def with_tiers(d: dict) -> dict:
    """``d`` plus a ``tiers`` section (the tier replay is not part of these tests)."""
    return {**d, "tiers": fake_tiers()}


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature and the chunk CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16 : 16 + 13]
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(kind + body) == crc, "IHDR checksum mismatch"
    width, height = struct.unpack(">II", body[:8])
    assert data.rstrip(b"\x00").endswith(b"IEND\xaeB`\x82"), "PNG is truncated"
    return width, height


def walk_spec(node):
    """Every dict inside a chart spec (a Vega-Lite JSON tree), depth first."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from walk_spec(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk_spec(v)


def nightly_profile(tmp_path, formats: list[str], analysis: str = ""):
    """A warehouse of a week of requests (2026-11-02..08) and a daily profile, "Nightly", writing
    ``formats`` to ``tmp_path/out`` at 00:15 every day; ``analysis``: the body of its
    [analysis] table. Returns the profile's path."""

    db = tmp_path / "kv.duckdb"
    with week_store(db):
        pass
    prof = tmp_path / "nightly.toml"
    prof.write_text(
        f"""
title = "Nightly"
[inputs]
warehouse = "{db}"
[window]
period = "last 1d"
[analysis]
{analysis}
[output]
root = "{tmp_path / "out"}"
formats = {formats!r}
[schedule]
cron = "15 0 * * *"
""".replace("'", '"')
    )
    return prof
