"""Builders of canonical rows for tests that exercise the warehouse without a parser."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from kvtrace.ingest.base import REQUEST_SCHEMA, Parsed

DEFAULTS = dict(
    request_id=None,
    message_id=None,
    source="test",
    agent="claude-code",
    session_id="s1",
    thread_id="main",
    user_id="u1",
    org_id="o1",
    project=None,
    model="claude-sonnet-4-6",
    query_source="main",
    input_tokens=0,
    cache_read_tokens=0,
    cache_write_5m_tokens=0,
    cache_write_1h_tokens=0,
    cache_write_unknown_tokens=0,
    output_tokens=0,
    cost_usd=None,
    duration_ms=None,
    ttft_ms=None,
    is_sidechain=False,
    attributes=None,
    ingested_from="test:1",
)


def request_rows(*rows: dict) -> pa.Table:
    """Arrow ``requests`` rows; each dict needs ``request_key`` and ``ts`` (datetime or minutes)."""
    cols = {f.name: [] for f in REQUEST_SCHEMA}
    for r in rows:
        d = {**DEFAULTS, **r}
        if isinstance(d["ts"], (int, float)):
            d["ts"] = dt.datetime(2026, 11, 2, 9, 0) + dt.timedelta(minutes=d["ts"])
        for k in cols:
            cols[k].append(d[k])
    return pa.table(cols, schema=REQUEST_SCHEMA)


def parsed(*rows: dict) -> Parsed:
    return Parsed(requests=request_rows(*rows))
