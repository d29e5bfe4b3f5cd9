"""Required capacity at an idle TTL: the working set over time, with unlimited capacity.

Under an idle TTL ``tau`` refreshed on every access, a block is held from an access until
``tau`` after its last access before a gap longer than ``tau`` (or its last access at all).
So the held set changes only at request times (blocks that are new or expired come in) and
``tau`` after them (blocks whose next use is further away than ``tau`` go out): two sorted
event lists per TTL, computed from runs, never from single blocks.

Capacity is counted in blocks and reported in tokens as ``blocks x block_size`` (a KV cache
allocates whole blocks, a partial last block included) and in bytes as tokens x bytes per token
(``2 x layers x kv_heads x head_dim x dtype bytes`` for a model; see ``kvtrace size``).
"""

from __future__ import annotations

import numpy as np

from kvtrace.analyze.access import NEVER, seconds_to_us, times_for, ts_us
from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.units import fmt_duration

SERIES_POINTS = 240
# A capacity figure rests on too little data below these (a session's reuse is one sample of it).
MIN_SESSIONS = 10
MIN_REQUESTS = 100  # block traces without sessions
# Whether the working set settled: its peak per equal span of the trace's time, and the rise of
# the last quarter's peak over the first half's (after the first TTL, while it fills) that says
# it was still growing when the trace ended.
TIME_BUCKETS = 64
STILL_RISING = 1.25


def time_buckets(t: np.ndarray) -> np.ndarray:
    """The bucket of each request time (µs, non-decreasing) among ``TIME_BUCKETS`` equal spans."""
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64)
    return (t - t[0]) * TIME_BUCKETS // (t[-1] - t[0] + 1)


def peak_by_time(trace: BlockTrace, ttl_s: float | None) -> np.ndarray:
    """The working set's peak within each of ``TIME_BUCKETS`` equal spans of the trace's time."""
    out = np.zeros(TIME_BUCKETS, dtype=np.int64)
    if trace.n_requests:
        np.maximum.at(out, time_buckets(ts_us(trace)), held_after_requests(trace, ttl_s))
    return out


def still_rising(peaks: np.ndarray, span_us: int, ttl_us: int) -> float | None:
    """The last quarter's peak over the first half's, after the first ``ttl_us`` (the fill), when
    it is more than ``STILL_RISING``: the working set was still growing at the end (a load that
    rises and falls within the trace, as a day's does, has its peak in the middle, and passes).
    None when it settled or the spans are too few."""
    width = (span_us + 1) / len(peaks)
    rest = peaks[int(np.ceil(ttl_us / width)) :]
    if len(rest) < 4:
        return None
    early, late = int(rest[: len(rest) // 2].max()), int(rest[len(rest) - len(rest) // 4 :].max())
    return late / early if early > 0 and late > STILL_RISING * early else None


def _ttl_names(ttls: list[float], verb: bool = True) -> str:
    names = ", ".join(fmt_duration(t) for t in ttls)
    if len(ttls) == 1:
        return f"The {names} TTL is" if verb else f"the {names} TTL"
    return f"The {names} TTLs are" if verb else f"the {names} TTLs"


def sizing_warnings(
    trace: BlockTrace, ttls: list[float | None], peaks: dict[int, np.ndarray] | None = None
) -> list[str]:
    """What the capacity figures of ``trace`` at ``ttls`` rest on that may not hold, one sentence
    each (empty when nothing): a TTL of 0, a TTL as long as the trace or longer, a trace shorter
    than twice a TTL (the working set fills for one TTL and needs another to show a steady
    state), a working set still rising at the end of the trace, too few sessions (or requests,
    when the trace has no sessions). ``peaks``: the working set's peak over time per TTL in µs
    (:func:`peak_by_time`), when the caller has it (else computed from the trace's blocks; a
    trace whose blocks were let go gets no steady-state check)."""
    n = trace.n_requests
    if n == 0:
        return []
    out = []
    span = float(trace.ts[-1] - trace.ts[0])
    if trace.session is not None:
        sessions = len(np.unique(trace.session))
        if sessions < MIN_SESSIONS:
            out.append(
                f"Only {sessions} session{'s' if sessions != 1 else ''} ({n:,} requests over "
                f"{fmt_duration(span)}): every figure rests on too few sessions to size a fleet; "
                f"use a window with at least {MIN_SESSIONS}."
            )
    elif n < MIN_REQUESTS:
        out.append(
            f"Only {n} requests over {fmt_duration(span)}: every figure rests on too few requests to size "
            f"a fleet; use a trace with at least {MIN_REQUESTS}."
        )
    finite = sorted({float(t) for t in ttls if t is not None and not np.isinf(t)})
    if finite and finite[0] <= 0:
        out.append(
            "TTL 0 s keeps nothing between requests: its hit ratio and working set are those of no "
            "cache at all (did you mean a duration such as 5m?)."
        )
    longer = [t for t in finite if t > 0 and t >= span]
    if longer:
        out.append(
            f"{_ttl_names(longer)} as long as the trace ({fmt_duration(span)}) or longer: nothing "
            f"expires within it, so the working set is everything the trace touched, not a steady "
            f"state; size on a trace several times longer than the TTL."
        )
    filling = [t for t in finite if 0 < t < span < 2 * t]
    if filling:
        out.append(
            f"The trace ({fmt_duration(span)}) covers less than twice {_ttl_names(filling, verb=False)}: "
            f"the working set fills during the first TTL and never reached a steady state; the "
            f"figures at {'these TTLs' if len(filling) > 1 else 'this TTL'} may understate a longer run."
        )
    rising = []
    # the peaks over time: the caller's, else from the trace's blocks (while it still has them)
    own = peaks is None and len(trace.hash_ids) == trace.n_blocks
    for ttl in (t for t in finite if 0 < t and 2 * t <= span):
        tau = seconds_to_us(ttl)
        series = peak_by_time(trace, ttl) if own else (peaks or {}).get(tau)
        if series is None:
            continue
        ratio = still_rising(series, int(round(span * 1e6)), tau)
        if ratio is not None:
            rising.append(f"{fmt_duration(ttl)} (+{ratio - 1:.0%})")
    if rising:
        out.append(
            f"The working set was still rising when the trace ended, at {', '.join(rising)}: the peak "
            f"in the last quarter of the trace exceeds the first half's (after the first TTL); the "
            f"capacity for a longer run may be larger."
        )
    return out


def _events(trace: BlockTrace, tau_us: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks that come in at each request, and that go out ``tau`` after each request."""
    runs, rt = times_for(trace)
    live = ~runs.dup
    n = trace.n_requests
    come = np.bincount(runs.req, weights=runs.blocks * (live & (rt.age > tau_us)), minlength=n)
    go = np.bincount(runs.req, weights=runs.blocks * (live & (rt.next_gap > tau_us)), minlength=n)
    return come.astype(np.int64), go.astype(np.int64), ts_us(trace)


def held_after_requests(trace: BlockTrace, ttl_s: float | None) -> np.ndarray:
    """Blocks held right after each request (the working set's value at its peaks)."""
    tau = seconds_to_us(ttl_s)
    return _held(tau, *_events(trace, tau))


def _held(tau: int, come: np.ndarray, go: np.ndarray, t: np.ndarray) -> np.ndarray:
    held = np.cumsum(come)
    if tau < NEVER - 1:
        # A block whose last access was at t_j is still held at t_j + tau (age == TTL hits),
        # so it has left before request i only when t_j + tau < t_i.
        gone = np.searchsorted(t + tau, t, side="left")
        cum_go = np.concatenate(([0], np.cumsum(go)))
        held = held - cum_go[gone]
    return held


def working_set(
    trace: BlockTrace, ttl_s: float | None, bytes_per_token: float | None = None, series_points: int = SERIES_POINTS
) -> dict:
    """The working set under one TTL, over the trace's span.

    Args:
        trace: the block trace.
        ttl_s: idle TTL in seconds (None: no TTL, everything ever seen is held).
        bytes_per_token: KV bytes per token of the serving model (None: tokens only).
        series_points: number of time buckets of the downsampled series (0: no series).

    Returns:
        ``{mean_tokens, p99_tokens, peak_tokens, peak_at, mean_bytes, p99_bytes, peak_bytes,
        series}``: mean and p99 are time-weighted over the span from the first to the last
        request; the series holds per bucket the time-mean and the maximum, in tokens.
    """
    B = trace.block_size
    n = trace.n_requests
    empty = {
        "mean_tokens": 0.0,
        "p99_tokens": 0,
        "peak_tokens": 0,
        "peak_at": None,
        "mean_bytes": None,
        "p99_bytes": None,
        "peak_bytes": None,
        "series": None,
    }
    if n == 0:
        return empty
    tau = seconds_to_us(ttl_s)
    come, go, t = _events(trace, tau)
    held_i = _held(tau, come, go, t)
    peak_i = int(np.argmax(held_i))
    t0, t1 = int(t[0]), int(t[-1])

    # The step function over [t0, t1]: +come at t_i, -go at t_j + tau (two sorted lists, merged).
    if tau < NEVER - 1:
        keep = go > 0
        out_t = (t + tau)[keep]
        keep_in = out_t <= t1
        out_t, out_d = out_t[keep_in], -go[keep][keep_in]
        times = np.empty(n + len(out_t), dtype=np.int64)
        delta = np.empty(len(times), dtype=np.int64)
        pos_in = np.arange(n) + np.searchsorted(out_t, t, side="left")
        pos_out = np.arange(len(out_t)) + np.searchsorted(t, out_t, side="right")
        times[pos_in], delta[pos_in] = t, come
        times[pos_out], delta[pos_out] = out_t, out_d
    else:
        times, delta = t, come
    level = np.cumsum(delta)
    # Collapse events at equal times: the level after the last one holds until the next time.
    last_of_time = np.append(times[1:] != times[:-1], True)
    times, level = times[last_of_time], level[last_of_time]
    dur = np.diff(np.append(times, t1)).astype(np.float64)
    span = float(t1 - t0)
    if span > 0:
        mean_blocks = float(np.dot(level, dur) / span)
        p99_blocks = _weighted_quantile(level, dur, 0.99)
    else:
        mean_blocks = p99_blocks = float(held_i.max())
    out = {
        "mean_tokens": mean_blocks * B,
        "p99_tokens": int(round(p99_blocks)) * B,
        "peak_tokens": int(held_i[peak_i]) * B,
        "peak_at": _iso(t[peak_i]),
    }
    for key in ("mean", "p99", "peak"):
        out[f"{key}_bytes"] = None if bytes_per_token is None else out[f"{key}_tokens"] * float(bytes_per_token)
    out["series"] = _series(times, level, t0, t1, B, series_points) if series_points else None
    return out


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value whose cumulative weight reaches ``q`` of the total (values >= 0)."""
    vmax = int(values.max()) if len(values) else 0
    if vmax <= max(4 * len(values), 1 << 20):
        # Held block counts are small integers: a weighted histogram instead of a sort.
        cw = np.cumsum(np.bincount(values.astype(np.int64), weights=weights, minlength=vmax + 1))
        if cw[-1] <= 0:
            return float(vmax)
        return float(np.searchsorted(cw, q * cw[-1], side="left"))
    order = np.argsort(values, kind="stable")
    cw = np.cumsum(weights[order])
    if cw[-1] <= 0:
        return float(values.max())
    k = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(values[order][min(k, len(order) - 1)])


def _series(times: np.ndarray, level: np.ndarray, t0: int, t1: int, B: int, points: int) -> dict:
    """Per bucket the time-mean and the maximum held tokens (peaks survive downsampling)."""
    points = max(1, min(points, max(1, len(times))))
    edges = np.linspace(t0, t1, points + 1) if t1 > t0 else np.array([t0, t0 + 1.0])
    points = len(edges) - 1
    # Integral of the step function at each event time, then at the bucket edges.
    dur = np.diff(np.append(times, t1)).astype(np.float64)
    integral = np.concatenate(([0.0], np.cumsum(level * dur)))
    k = np.searchsorted(times, edges, side="right") - 1  # last event at or before edge
    k = np.clip(k, 0, len(times) - 1)
    at_edge = integral[k] + level[k] * (edges - times[k])
    width = np.diff(edges)
    mean = np.diff(at_edge) / width
    bucket = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, points - 1)
    mx = level[k[:-1]].astype(np.float64)  # level carried into the bucket
    np.maximum.at(mx, bucket, level)
    return {
        "t0": _iso(t0),
        "step_s": float(width[0]) / 1e6,
        "mean_tokens": [round(float(x) * B, 1) for x in mean],
        "max_tokens": [int(x) * B for x in mx],
    }


def _iso(us: int | float) -> str:
    # numpy, not datetime: any stored time (a year beyond 9999 too) has an ISO form
    return str(np.datetime64(int(us), "us").astype("datetime64[s]")) + "Z"
