"""The generator's exact ledger: one row per API request, as the generator reported it.

Tests compare the emitted OTLP and transcripts against it, and analyses can check derived prefix
chains against it: within a thread (``thread_id``), a request whose ``chain_reason`` is null
has a prompt that starts with the previous request's ``cached_prefix_tokens`` (its read + write);
``chain_reason`` names why a new chain starts (``start``: first request of a session or subagent,
``compaction``, ``model_change``). ``read_source`` says what the cache served: the previous
prefix, only the shared head, nothing, or the prompt was too short to cache.

Times: the cache's TTL clock runs from a request's *start* (``start_ms``); telemetry and
transcripts stamp the *end* (``end_ms`` = start + ``duration_ms``), which is the ``ts`` column.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

SCHEMA = [
    ("seq", "int64"),
    ("request_id", "string"),
    ("message_id", "string"),
    ("session_id", "string"),
    ("thread_id", "string"),
    ("agent_id", "string"),
    ("is_sidechain", "bool"),
    ("user_id", "string"),
    ("org_id", "string"),
    ("project", "string"),
    ("model", "string"),
    ("query_source", "string"),
    ("prompt_id", "string"),
    ("start_ms", "int64"),
    ("end_ms", "int64"),
    ("prompt_tokens", "int64"),
    ("new_tokens", "int64"),
    ("input_tokens", "int64"),
    ("cache_read_tokens", "int64"),
    ("cache_write_5m_tokens", "int64"),
    ("cache_write_1h_tokens", "int64"),
    ("cache_creation_tokens", "int64"),
    ("output_tokens", "int64"),
    ("cost_usd", "float64"),
    ("duration_ms", "int64"),
    ("ttft_ms", "int64"),
    ("head_tokens", "int64"),
    ("cached_prefix_tokens", "int64"),
    ("read_source", "string"),
    ("chain_reason", "string"),
    ("in_transcript", "bool"),
]
COLUMNS = [c for c, _ in SCHEMA]


class Ledger:
    """Collects request rows (and running totals, kept even when rows are not)."""

    def __init__(self, ttl_s: int, keep_rows: bool = True):
        self.one_hour = ttl_s >= 3600
        self.keep_rows = keep_rows
        self.rows: list[tuple] = []
        self.totals: Counter = Counter()
        self.notes: Counter = Counter()

    # -- sink interface -------------------------------------------------------------------
    def request(self, r: Any) -> None:
        th = r.thread
        s = th.session
        w5, w1 = (0, r.write) if self.one_hour else (r.write, 0)
        t = self.totals
        t["requests"] += 1
        t["input_tokens"] += r.input
        t["cache_read_tokens"] += r.read
        t["cache_write_5m_tokens"] += w5
        t["cache_write_1h_tokens"] += w1
        t["output_tokens"] += r.output_tokens
        t["cost_usd_micro"] += round(r.cost_usd * 1e6)
        if self.keep_rows:
            self.rows.append(
                (
                    r.seq,
                    r.request_id,
                    r.message_id,
                    s.id,
                    th.thread_id,
                    th.agent_id,
                    th.kind != "main",
                    s.user.id,
                    s.user.org_id,
                    s.project,
                    r.model,
                    r.query_source,
                    r.prompt_id,
                    r.start_ms,
                    r.end_ms,
                    r.prompt_tokens,
                    r.new_tokens,
                    r.input,
                    r.read,
                    w5,
                    w1,
                    r.write,
                    r.output_tokens,
                    r.cost_usd,
                    r.duration_ms,
                    r.ttft_ms,
                    r.head,
                    r.read + r.write,
                    r.source,
                    r.chain_reason,
                    r.in_transcript,
                )
            )

    def note(self, n: Any) -> None:
        self.notes[n.kind] += 1

    def advance(self, now_ms: int) -> None:
        pass

    def close(self) -> None:
        pass

    # -- views ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def to_dicts(self) -> list[dict]:
        """The rows as dicts (small runs, tests)."""
        return [dict(zip(COLUMNS, row)) for row in self.rows]

    def to_arrow(self):
        """The rows as a ``pyarrow.Table``: ``start_ms``/``end_ms`` epoch ms, plus ``ts`` (the end, UTC)."""
        import pyarrow as pa

        cols = list(zip(*self.rows)) if self.rows else [[] for _ in COLUMNS]
        arrays = {
            name: pa.array(list(col), type=pa.bool_() if typ == "bool" else getattr(pa, typ)())
            for (name, typ), col in zip(SCHEMA, cols)
        }
        table = pa.table(arrays)
        ts = table["end_ms"].cast(pa.timestamp("ms", tz="UTC"))
        return table.append_column("ts", ts)

    def to_polars(self):
        """The rows as a Polars DataFrame."""
        import polars as pl

        return pl.from_arrow(self.to_arrow())

    def token_mix(self) -> dict[str, float]:
        """Shares of the five token classes (token-weighted), from the running totals."""
        t = self.totals
        classes = (
            "cache_read_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
            "input_tokens",
        )
        total = sum(t[c] for c in classes) or 1
        return {c: t[c] / total for c in classes}
