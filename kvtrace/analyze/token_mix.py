"""Token classes: totals, shares and the token-weighted cache hit ratio, overall and per group.

Shares are token-weighted (never per call). The hit ratio is
``cache_read / (cache_read + cache_write + uncached input)``: the share of prompt tokens served
from the cache.

The input is a *rollup* frame (``queries/usage_rollup.sql``): token sums per hour x agent x
session x user x model x query source x project, with a ``requests`` count. DuckDB does the scan
over every request; Polars groups the much smaller rollup however the report asks.
"""

from __future__ import annotations

import polars as pl

# Report key -> warehouse column, in the order reports show them.
CLASSES: dict[str, str] = {
    "cache_read": "cache_read_tokens",
    "cache_write_5m": "cache_write_5m_tokens",
    "cache_write_1h": "cache_write_1h_tokens",
    "cache_write_unknown": "cache_write_unknown_tokens",
    "output": "output_tokens",
    "input_uncached": "input_tokens",
}
WRITE_KEYS = ("cache_write_5m", "cache_write_1h", "cache_write_unknown")

# --group-by name -> expression over the rollup frame (time keys are formatted after grouping).
GROUPS: dict[str, pl.Expr] = {
    "day": pl.col("hour").dt.truncate("1d"),
    "hour": pl.col("hour"),
    "model": pl.col("model"),
    "user": pl.col("user_id"),
    "session": pl.col("session_id"),
    "query_source": pl.col("query_source"),
    "agent": pl.col("agent"),
    "project": pl.col("project"),
}


def _mix_exprs() -> list[pl.Expr]:
    return [pl.col(col).sum().cast(pl.Int64).alias(key) for key, col in CLASSES.items()]


def mix_from_totals(t: dict) -> dict:
    """``token_mix`` dict (classes, total, shares, hit ratio) from per-class totals."""
    mix = {k: int(t.get(k) or 0) for k in CLASSES}
    total = sum(mix.values())
    prompt = mix["cache_read"] + sum(mix[k] for k in WRITE_KEYS) + mix["input_uncached"]
    mix["total"] = total
    mix["shares"] = {k: (mix[k] / total if total else 0.0) for k in [*CLASSES, "total"]}
    mix["cache_hit_ratio"] = mix["cache_read"] / prompt if prompt else 0.0
    return mix


TIME_KEY_FORMAT = {"day": "%Y-%m-%d", "hour": "%Y-%m-%dT%H:00"}


def token_mix(usage: pl.DataFrame) -> dict:
    """The overall token mix of a rollup frame."""
    if usage.height == 0:
        return mix_from_totals({})
    return mix_from_totals(usage.select(_mix_exprs()).row(0, named=True))


def token_mix_by(usage: pl.DataFrame, group: str) -> list[dict]:
    """One token-mix entry per value of ``group`` (see :data:`GROUPS`), largest total first
    (by key for time groups)."""
    expr = GROUPS[group]
    if usage.height == 0:
        return []
    agg = (usage.group_by(expr.alias("key"))
           .agg(pl.col("requests").sum(), pl.col("session_id").drop_nulls().n_unique().alias("sessions"), *_mix_exprs()))
    if group in TIME_KEY_FORMAT:
        agg = agg.with_columns(pl.col("key").dt.strftime(TIME_KEY_FORMAT[group]))
    out = []
    for row in agg.iter_rows(named=True):
        entry = {"key": row["key"], "requests": row["requests"], "sessions": row["sessions"]}
        entry["token_mix"] = mix_from_totals(row)
        out.append(entry)
    if group in ("day", "hour"):
        out.sort(key=lambda e: (e["key"] is None, e["key"] or ""))
    else:
        out.sort(key=lambda e: -e["token_mix"]["total"])
    return out
