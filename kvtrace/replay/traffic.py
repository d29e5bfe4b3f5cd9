"""Tier traffic: which tier serves each hit, what is written where, occupancy and endurance.

Tiers are depth bands of the one LRU stack (see ``kvtrace.replay.distances``).

- **exclusive** (demote on evict): tier *k* holds depths ``(B[k-1], B[k]]`` with ``B`` the
  cumulative capacities. A hit at depth ``d`` is read from the tier whose band holds ``d`` and
  moves to the top (tier 1). Every block a request brings to the top from below ``B[k]`` pushes one
  block across that boundary: a write into tier *k+1* (an eviction from the last tier). Per request
  that is ``max(0, (u - a) - room)`` blocks, with ``u`` its distinct blocks, ``a`` those already
  above ``B[k]`` and ``room`` the free space above ``B[k]`` while the stack is still filling. This
  is the exact net flow when a request has at most ``B[k]`` blocks (a longer one spills its own
  tail across the boundary and is counted as it arrives).
- **inclusive** (write-through, LMCache / Dynamo KVBM): tier *k* holds the top ``C[k]`` blocks;
  a hit is read from the fastest tier that has it; every block a tier lacks is written to it.

With an idle TTL, expired blocks are neither hits nor demoted, and the stack's live size is the
number of blocks not older than the TTL. Occupancy is the live stack clipped to each band.
"""

from __future__ import annotations

import numpy as np

from kvtrace.replay.distances import Distances
from kvtrace.replay.grid import run_token_split
from kvtrace.replay.tiers import ResolvedTier
from kvtrace.units import fmt_duration

_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def band_hits(dist: Distances, input_length: np.ndarray, block_size: int, bounds: np.ndarray, ttl_us: int, n: int):
    """Per request and band ``(bounds[k], bounds[k+1]]``: hit blocks and hit tokens of the runs not
    older than the TTL, and the blocks of those runs at any depth (they were live)."""
    if dist.kernel.startswith("numba"):  # the compiled twin (numba is loaded already)
        from kvtrace.replay.kernel import band_sums

        return band_sums(dist, input_length, block_size, bounds, ttl_us, n)
    K = len(bounds) - 1
    ok = dist.age <= ttl_us
    full, part = run_token_split(dist, input_length, block_size)
    req, x0, ln = dist.req[ok], dist.d[ok] - 1, dist.blocks[ok]
    full, part = full[ok], part[ok]
    blocks = np.zeros((K, n), dtype=np.int64)
    tokens = np.zeros((K, n), dtype=np.int64)
    prev_b = prev_t = 0
    for k in range(K):
        B = bounds[k + 1]
        upto_b = np.clip(B - x0, 0, ln)
        upto_t = block_size * np.clip(B - x0, 0, full) + np.where(B - x0 > full, part, 0)
        np.add.at(blocks[k], req, upto_b - prev_b)
        np.add.at(tokens[k], req, upto_t - prev_t)
        prev_b, prev_t = upto_b, upto_t
    live_hit = np.zeros(n, dtype=np.int64)
    np.add.at(live_hit, req, ln)
    return blocks, tokens, live_hit


def nice_window(span_s: float, points: int) -> float:
    """A round bucket width (s) giving at most about ``points`` buckets over ``span_s``."""
    want = span_s / max(points, 1)
    for s in _NICE_STEPS:
        if s >= want:
            return float(s)
    return float(np.ceil(want / 86400) * 86400)


def tier_traffic(
    dist: Distances,
    t_us: np.ndarray,
    input_length: np.ndarray,
    block_size: int,
    tiers: list[ResolvedTier],
    mode: str,
    ttl_us: int,
    bytes_per_token: int,
    points: int = 480,
    hits=None,
    total_tokens: float | None = None,
) -> tuple[list[dict], np.ndarray, np.ndarray, dict]:
    """Per-tier hits, reads, writes, occupancy and endurance under one idle TTL.

    A sampled replay (``kvtrace.replay.sample``) passes its weighted band ``hits`` (as
    :func:`band_hits` returns them) and the full trace's ``total_tokens``; ``dist.unique`` and
    ``dist.live`` are then weighted too.

    Returns:
        ``(per-tier dicts, hit blocks (K, n), hit tokens (K, n), window info)``.
    """
    n = len(t_us)
    K = len(tiers)
    caps = np.array([t.capacity_blocks for t in tiers], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(caps) if mode == "exclusive" else caps])
    hit_b, hit_t, live_hit = hits if hits is not None else band_hits(dist, input_length, block_size, bounds, ttl_us, n)
    u = dist.unique if hits is not None else dist.unique.astype(np.int64)
    before = dist.live[ttl_us] if hits is not None else dist.live[ttl_us].astype(np.int64)
    above = np.cumsum(hit_b, axis=0, dtype=hit_b.dtype if hits is not None else np.int64)  # blocks above each bound
    after = before + u - live_hit  # live blocks after each request
    del live_hit

    def pushed(k):  # blocks pushed down across bounds[k]
        return np.maximum((u - above[k - 1]) - np.maximum(bounds[k] - before, 0), 0)

    t0 = int(t_us[0]) if n else 0
    span_s = (int(t_us[-1]) - t0) / 1e6 if n else 0.0
    w = nice_window(span_s, points)
    nb = int(span_s // w) + 1
    bucket = ((t_us - t0) // int(w * 1e6)).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.diff(bucket, prepend=-1)) if n else np.zeros(0, dtype=np.int64)
    total_tokens = float(input_length.sum()) if total_tokens is None else total_tokens
    out = []
    for k, rt in enumerate(tiers):
        t = rt.tier
        bpb = rt.bytes_per_block
        extra = bpb - block_size * bytes_per_token  # window / state a block carries
        read = hit_t[k] * float(bytes_per_token) + hit_b[k] * float(extra)
        if mode == "exclusive":
            wblocks = u - above[0] if k == 0 else pushed(k)
            occ = np.minimum(np.maximum(np.minimum(after, bounds[K]) - bounds[k], 0), caps[k])
        else:
            wblocks = u - above[k]
            occ = np.minimum(after, caps[k])
        rb = np.bincount(bucket, weights=read, minlength=nb)
        wb = np.bincount(bucket, weights=wblocks, minlength=nb) * bpb
        ob = np.zeros(nb, dtype=np.int64)
        if n:
            ob[bucket[starts]] = np.maximum.reduceat(occ, starts)
        full_at = np.flatnonzero(occ >= caps[k]) if caps[k] > 0 else np.zeros(0, dtype=np.int64)
        write_total = float(wblocks.sum()) * bpb
        mean_w = write_total / span_s if span_s > 0 else None
        peak_w = float(wb.max()) / w if nb else 0.0
        item = {
            "name": t.name,
            "kind": t.kind,
            "capacity_blocks": int(caps[k]),
            "capacity_tokens": int(caps[k]) * block_size,
            "capacity_bytes": float(caps[k]) * bpb,
            "depth_tokens": int(bounds[k + 1]) * block_size,
            "hit_blocks": int(hit_b[k].sum()),
            "hit_tokens": int(hit_t[k].sum()),
            "hit_ratio_tokens": float(hit_t[k].sum()) / total_tokens if total_tokens else 0.0,
            "read_bytes": float(read.sum()),
            "write_bytes": write_total,
            "read_bytes_per_s_mean": float(read.sum()) / span_s if span_s > 0 else None,
            "read_bytes_per_s_peak": float(rb.max()) / w if nb else 0.0,
            "write_bytes_per_s_mean": mean_w,
            "write_bytes_per_s_peak": peak_w,
            "read_gbps": t.read_gbps,
            "write_gbps": t.write_gbps,
            "latency_us": t.latency_us,
            "occupancy_peak_bytes": float(occ.max()) * bpb if n else 0.0,
            "occupancy_end_bytes": float(occ[-1]) * bpb if n else 0.0,
            "first_full_s": float(t_us[full_at[0]] - t0) / 1e6 if len(full_at) else None,
            "fills_at": _when(int(t_us[full_at[0]]), t0) if len(full_at) else None,
            "capex_usd": _capex(t, float(caps[k]) * bpb),
            **_drives(t, mean_w, peak_w),
            "series": {
                "step_s": w,
                "read_bytes_per_s": [round(x / w, 1) for x in rb],
                "write_bytes_per_s": [round(x / w, 1) for x in wb],
                "occupancy_bytes": [float(x) * bpb for x in ob],
            },
        }
        out.append(item)
    if out:
        last = (
            pushed(K) if mode == "exclusive" else np.maximum((u - above[K - 1]) - np.maximum(bounds[K] - before, 0), 0)
        )
        out[-1]["evicted_bytes"] = float(last.sum()) * tiers[-1].bytes_per_block
    info = {"window_s": w, "span_s": span_s, "ttl_us": ttl_us}
    return out, hit_b, hit_t, info


def _capex(t, kv_bytes: float) -> float | None:
    if t.usd_per_tb is None:
        return None
    raw = t.drives.count * t.drives.size_bytes if t.drives is not None else kv_bytes
    return raw / 1e12 * float(t.usd_per_tb)


def _drives(t, mean_w: float | None, peak_w: float) -> dict:
    d = t.drives
    if d is None:
        return {}
    mean = d.dwpd(mean_w) if mean_w is not None else None
    return {
        "drives": d.count,
        "drive_size_bytes": d.size_bytes,
        "raid": d.raid,
        "waf": d.waf,
        "usable_bytes": d.usable_bytes,
        "dwpd_rating": d.dwpd_rating,
        "dwpd_per_drive": mean,
        "dwpd_per_drive_at_peak": d.dwpd(peak_w),
        "within_rating": None if d.dwpd_rating is None or mean is None else mean <= d.dwpd_rating,
    }


def _when(us: int, t0: int) -> str:
    """When a tier filled: a UTC time for wall-clock traces, else the offset from the start."""
    from datetime import datetime, timezone

    if t0 > 10**15:  # after 2001-09: the trace carries real times
        return datetime.fromtimestamp(us / 1e6, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "+" + fmt_duration((us - t0) / 1e6)
