"""Builders of the ``chain_requests`` frames that prefix-chain derivation reads (no tests here):
``frame`` turns rows given as time, cache read and cache write tokens (seconds and token counts,
with defaults for every other column) into the frame ``derive_chains`` takes, in its column order
and sorted by time."""

from __future__ import annotations

import polars as pl

COLUMNS = [
    "request_key",
    "ts_us",
    "org_id",
    "session_id",
    "thread_id",
    "model",
    "query_source",
    "read_tokens",
    "write_tokens",
    "write_5m_tokens",
    "write_1h_tokens",
    "input_tokens",
    "output_tokens",
    "is_compact_request",
    "after_compaction",
]


def frame(*rows: dict) -> pl.DataFrame:
    """A ``chain_requests`` frame; each row needs t (seconds), read, write (defaults for the rest)."""
    out = []
    for k, r in enumerate(rows):
        d = dict(
            request_key=f"r{k:04d}",
            org_id="o",
            session_id="s",
            thread_id="main",
            model="m",
            query_source="main",
            input_tokens=2,
            output_tokens=100,
            is_compact_request=False,
            after_compaction=False,
        )
        d.update({x: v for x, v in r.items() if x not in ("t", "read", "write", "write_1h")})
        d.update(
            ts_us=int(r["t"] * 1e6),
            read_tokens=r["read"],
            write_tokens=r["write"],
            write_5m_tokens=r["write"] - r.get("write_1h", 0),
            write_1h_tokens=r.get("write_1h", 0),
        )
        out.append(d)
    return pl.DataFrame(out, schema_overrides={"ts_us": pl.Int64}).select(COLUMNS).sort("ts_us", "request_key")
