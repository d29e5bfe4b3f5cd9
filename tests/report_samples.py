"""Report dicts for the HTML, chart and schedule tests.

``load_week`` puts seeded requests into a warehouse through the ingest merge; ``with_sections``
adds the optional sections (``ttl``, ``reuse``, ``tiers``, ``spend``) in the shapes that
docs/report-schema.md documents, so every chart builder has its data without running the reuse
and replay engines.
"""

from __future__ import annotations

import datetime as dt
import random

from kvtrace.ingest.pipeline import IngestSummary, _merge
from tests.builders import parsed

T0 = dt.datetime(2026, 11, 2, 0, 0)


def week_rows(days: int = 7, per_day: int = 40, seed: int = 7, start: dt.datetime = T0,
              prefix: str = "r") -> list[dict]:
    """Requests spread over ``days`` UTC days from ``start``; seeded."""
    rng = random.Random(seed)
    rows = []
    for day in range(days):
        for i in range(per_day):
            ts = start + dt.timedelta(days=day, seconds=rng.randint(0, 86399))
            rows.append(dict(
                request_key=f"{prefix}{day}-{i}", ts=ts, session_id=f"s{day}-{i % 5}",
                model=rng.choice(["claude-sonnet-4-6", "claude-opus-4-6"]),
                cache_read_tokens=rng.randint(20_000, 60_000), cache_write_5m_tokens=rng.randint(0, 900),
                cache_write_1h_tokens=rng.choice([0, 0, rng.randint(0, 400)]),
                output_tokens=rng.randint(40, 400), input_tokens=rng.randint(0, 12)))
    return rows


def load_rows(store, rows: list[dict]) -> None:
    with store.transaction():
        _merge(store, parsed(*rows), IngestSummary())


def with_sections(d: dict) -> dict:
    """``d`` plus every optional section, with plausible numbers."""
    d = dict(d)
    start = T0
    ttls = [300.0, 3600.0]
    d["ttl"] = []
    for j, ttl in enumerate(ttls):
        series = [{"t": (start + dt.timedelta(minutes=30 * k)).isoformat() + "Z",
                   "tokens": (1 + j) * 2.0e6 * (1 + (k % 12) / 12)} for k in range(96)]
        d["ttl"].append({"ttl_s": ttl, "hit_ratio_tokens": 0.90 + 0.04 * j, "hit_ratio_blocks": 0.88 + 0.04 * j,
                         "working_set": {"mean_tokens": 3.0e6 * (1 + j), "p99_tokens": 3.9e6 * (1 + j),
                                         "peak_tokens": 4.0e6 * (1 + j), "peak_bytes": 4.0e6 * (1 + j) * 126976,
                                         "series": series}})
    d["reuse"] = {"reuse_time_cdf": [{"reuse_time_s": s, "cdf_tokens": min(1.0, 0.1 + 0.15 * i)}
                                     for i, s in enumerate([1, 5, 30, 60, 300, 900, 3600, 14400])]}
    caps = [10 ** (5 + k / 4) for k in range(13)]
    d["tiers"] = {
        "grid": [{"capacity_tokens": c, "ttl_s": t, "hit_ratio_tokens": min(0.97, 0.2 + 0.06 * i) * (0.95 if t == 300 else 1),
                  "hit_ratio_blocks": min(0.96, 0.2 + 0.06 * i)} for t in (*ttls, None) for i, c in enumerate(caps)],
        "tiers": [
            {"name": "HBM", "capacity_tokens": 2.0e6, "hit_ratio_tokens": 0.6, "write_bytes_per_s_mean": 2.1e9,
             "write_bytes_per_s_peak": 5.0e9},
            {"name": "DRAM", "capacity_tokens": 4.0e6, "hit_ratio_tokens": 0.25, "write_bytes_per_s_mean": 1.2e9,
             "write_bytes_per_s_peak": 3.1e9, "fills_at": "2026-11-02T00:45:00Z"},
            {"name": "NVMe", "capacity_tokens": 8.0e8, "hit_ratio_tokens": 0.08, "write_bytes_per_s_mean": 0.9e9,
             "write_bytes_per_s_peak": 1.9e9, "dwpd_per_drive": 3.2, "dwpd_rating": 1.0},
        ],
        "ttft": {"continuing": {"p50_ms": 180.0, "p90_ms": 420.0, "p99_ms": 900.0, "max_ms": 2100.0},
                 "resumed": {"p50_ms": 950.0, "p90_ms": 2600.0, "p99_ms": 7000.0, "max_ms": 12000.0}},
    }
    d["spend"] = {"scenarios": [
        {"label": "5 min", "ttl_s": 300.0, "input_usd": 1.2, "cache_write_usd": 310.0, "cache_read_usd": 880.0,
         "output_usd": 95.0, "total_usd": 1286.2},
        {"label": "1 h", "ttl_s": 3600.0, "input_usd": 1.2, "cache_write_usd": 260.0, "cache_read_usd": 905.0,
         "output_usd": 95.0, "total_usd": 1261.2}]}
    return d
