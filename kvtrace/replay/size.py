"""``kvtrace size``: the back-of-the-envelope calculator, from the same catalog and tier maths.

- bytes per token of a model at a KV dtype;
- the capacity a token rate needs for a TTL (``rate x TTL`` tokens, times bytes per token);
- the drive writes per day of a sustained write rate on a drive set and RAID level;
- how long a capacity holds KV arriving at a rate.
"""

from __future__ import annotations

import math

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import KVModel
from kvtrace.replay.tiers import RAID_WRITE_FACTOR, Drives
from kvtrace.units import parse_bytes


def parse_drives(text: str, raid: str = "0", waf: float = 1.0, dwpd_rating: float | None = None) -> Drives:
    """``"8x12.8TB"`` -> 8 drives of 12.8 TB."""
    s = str(text).lower().replace(" ", "").replace("×", "x")
    count, sep, size = s.partition("x")
    if not sep or not count.isdigit():
        raise ConfigError(f"--drives {text!r} is not COUNTxSIZE", hint="e.g. --drives 8x12.8TB")
    raid = str(raid)
    if raid not in RAID_WRITE_FACTOR:
        raise ConfigError(f"--raid {raid!r}", hint="use 0, 1 or 10")
    return Drives(
        count=int(count),
        size_bytes=parse_bytes(size, what="--drives size"),
        raid=raid,
        waf=waf,
        dwpd_rating=dwpd_rating,
    )


def size_calc(
    model: KVModel | None = None,
    rate_tokens_s: float | None = None,
    ttl_s: float | None = None,
    write_bytes_s: float | None = None,
    drives: Drives | None = None,
    capacity_tokens: int | None = None,
    capacity_bytes: int | None = None,
    block_size: int | None = None,
) -> dict:
    """Every figure the given inputs determine (keys absent when they do not apply).

    Returns:
        A dict with, as they apply: ``bytes_per_token`` (and ``bytes_per_block``), ``capacity_tokens``
        and ``capacity_bytes`` (rate x TTL, or the given capacity), ``minutes_held`` (capacity / rate),
        ``write_bytes_per_s`` (rate x bytes/token unless given), ``dwpd_per_drive``; ``warnings``
        when a figure means less than it seems (a TTL of 0).
    """
    out: dict = {}
    bpt = None
    if model is not None:
        bpt = model.bytes_per_token
        out.update(model=model.name, kv_dtype=model.kv_dtype, bytes_per_token=bpt)
        if model.sliding_bytes_per_seq:
            out["sliding_window_bytes_per_seq"] = model.sliding_bytes_per_seq
        if model.state_bytes_per_seq:
            out["state_bytes_per_seq"] = model.state_bytes_per_seq
        if block_size:
            out.update(block_size=block_size, bytes_per_block=model.bytes_per_block(block_size))
    if capacity_bytes is not None and capacity_tokens is None:
        if bpt is None:
            raise ConfigError(
                "a capacity in bytes needs --model to convert it to tokens",
                hint="pass --model NAME (see kvtrace size --list)",
            )
        capacity_tokens = int(capacity_bytes // bpt)
    if rate_tokens_s is not None and ttl_s is not None and capacity_tokens is None:
        if math.isinf(ttl_s):
            raise ConfigError("a capacity for no TTL is unbounded", hint="give a TTL such as --ttl 1h")
        out.update(rate_tokens_per_s=rate_tokens_s, ttl_s=ttl_s)
        out["capacity_tokens"] = int(round(rate_tokens_s * ttl_s))
        if ttl_s <= 0:
            out["warnings"] = [
                "TTL 0 s keeps nothing between requests: a capacity of 0 is no cache at all "
                "(did you mean a duration such as 5m?)."
            ]
        if bpt is not None:
            out["capacity_bytes"] = out["capacity_tokens"] * bpt
    elif capacity_tokens is not None:
        out["capacity_tokens"] = int(capacity_tokens)
        out["capacity_bytes"] = (
            capacity_bytes if capacity_bytes is not None else (capacity_tokens * bpt if bpt is not None else None)
        )
        if rate_tokens_s:
            out.update(rate_tokens_per_s=rate_tokens_s, minutes_held=capacity_tokens / rate_tokens_s / 60)
    if write_bytes_s is None and rate_tokens_s is not None and bpt is not None and drives is not None:
        write_bytes_s = rate_tokens_s * bpt
    if drives is not None:
        if write_bytes_s is None:
            raise ConfigError("DWPD needs a write rate", hint="pass --write-rate 1.9GB/s, or --rate with --model")
        out.update(
            write_bytes_per_s=write_bytes_s,
            drives=drives.count,
            drive_size_bytes=drives.size_bytes,
            raid=drives.raid,
            waf=drives.waf,
            usable_bytes=drives.usable_bytes,
            dwpd_per_drive=drives.dwpd(write_bytes_s),
        )
        if drives.dwpd_rating is not None:
            out.update(dwpd_rating=drives.dwpd_rating, within_rating=out["dwpd_per_drive"] <= drives.dwpd_rating)
    if not out:
        raise ConfigError("nothing to calculate", hint="pass --model, --rate with --ttl, or --write-rate with --drives")
    return out
