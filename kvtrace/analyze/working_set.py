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

from kvtrace.analyze.access import CHUNK_REQUESTS, NEVER, run_chunks, seconds_to_us, ts_us
from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.quantile import TopQuantile
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
    t = ts_us(trace)
    if trace.n_requests:
        t0, t1 = int(t[0]), int(t[-1])
        for c, [(held, _, _, _)] in _steps(trace, [seconds_to_us(ttl_s)]):
            tc = t[c.lo : c.hi]
            np.maximum.at(out, (tc - t0) * TIME_BUCKETS // (t1 - t0 + 1), held)
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


def distinct_count(values: np.ndarray, stop: int | None = None) -> int:
    """How many distinct values: for integer ids one hash-table pass, no sort. With ``stop``, the
    count ends once it reaches ``stop`` (and returns ``stop``): enough for a threshold, and a
    100 M-request trace with many sessions is decided in its first few thousand rows."""
    from kvtrace.analyze._kernels import first_seen_codes

    values = np.asarray(values)
    if stop is not None:
        seen: set = set()
        step = max(1024, 4 * stop)
        for a in range(0, len(values), step):
            seen.update(np.unique(values[a : a + step]).tolist())
            if len(seen) >= stop:
                return stop
        return len(seen)
    if values.dtype.kind not in "iu":
        return len(np.unique(values))
    return len(first_seen_codes(values)[1])


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
        sessions = distinct_count(trace.session, stop=MIN_SESSIONS)
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


def _steps(trace: BlockTrace, taus: list[int], requests: int = CHUNK_REQUESTS):
    """The working set under each idle TTL of ``taus`` (µs), chunk by chunk in time order.

    Blocks come in at a request (those new to it, or older than the TTL) and go out a TTL
    after their last access before a gap longer than the TTL (a block last touched at ``t_j``
    is still held at ``t_j + tau``: an age equal to the TTL hits). Yields per chunk of runs
    (:func:`~kvtrace.analyze.access.run_chunks`) and per TTL ``(held, times, level, dur)``: the
    blocks held right after each of the chunk's requests, and the step function of the held
    blocks over the span of the trace as distinct event times, the level after them and how
    long it holds (to the next event time, or to the last request). An event time's duration
    needs the next one, so the chunk's last event time is given with the next chunk's.
    """
    t = ts_us(trace)
    t1 = int(t[-1]) if len(t) else 0
    states = [_Departures(tau) for tau in taus]
    for c in run_chunks(trace, requests):
        yield c, [st.step(c, t, t1, trace.n_requests) for st in states]


class _Departures:
    """What one TTL's working set carries from chunk to chunk."""

    def __init__(self, tau: int) -> None:
        self.tau = tau
        self.level = 0  # blocks held after the events already given
        self.out_t = np.zeros(0, dtype=np.int64)  # pending departures (time, blocks), in time order
        self.out_go = np.zeros(0, dtype=np.int64)
        self.last: tuple[int, int] | None = None  # the previous chunk's last event time and level

    def step(self, c, t: np.ndarray, t1: int, n: int):
        from kvtrace.analyze._kernels import held_events

        tc = t[c.lo : c.hi]
        size, pending = len(tc), len(self.out_t)
        queue_t = np.empty(pending + size, dtype=np.int64)
        queue_go = np.empty(pending + size, dtype=np.int64)
        queue_t[:pending], queue_go[:pending] = self.out_t, self.out_go
        held = np.empty(size, dtype=np.int64)
        # the previous chunk's last event first: its duration runs to this chunk's first event
        carry = 0 if self.last is None else 1
        times = np.empty(carry + size + len(queue_t), dtype=np.int64)
        level = np.empty(len(times), dtype=np.int64)
        if carry:
            times[0], level[0] = self.last
        runs = c.runs
        events, self.level, went, queued = held_events(
            runs.req, c.lo, runs.blocks, runs.dup, c.times.age, c.times.next_gap, self.tau,
            self.tau < NEVER - 1, tc, queue_t, queue_go, pending, self.level, held, times[carry:], level[carry:],
        )  # fmt: skip
        self.out_t, self.out_go = queue_t[went:queued].copy(), queue_go[went:queued].copy()
        times, level = times[: carry + events], level[: carry + events]
        dur = np.diff(np.append(times, t1)).astype(np.float64)
        if c.hi < n:
            self.last = (int(times[-1]), int(level[-1]))
            times, level, dur = times[:-1], level[:-1], dur[:-1]
        return held, times, level, dur


def held_after_requests(trace: BlockTrace, ttl_s: float | None) -> np.ndarray:
    """Blocks held right after each request (the working set's value at its peaks)."""
    held = [h for _, [(h, _, _, _)] in _steps(trace, [seconds_to_us(ttl_s)])]
    return np.concatenate(held) if held else np.zeros(0, dtype=np.int64)


def working_set(
    trace: BlockTrace,
    ttl_s: float | None,
    bytes_per_token: float | None = None,
    series_points: int = SERIES_POINTS,
    requests: int = CHUNK_REQUESTS,
) -> dict:
    """The working set under one TTL, over the trace's span (see :func:`working_sets`)."""
    return working_sets(trace, [ttl_s], bytes_per_token, series_points, requests)[0]


def working_sets(
    trace: BlockTrace,
    ttls: list[float | None],
    bytes_per_token: float | None = None,
    series_points: int = SERIES_POINTS,
    requests: int = CHUNK_REQUESTS,
    each_chunk=None,
) -> list[dict]:
    """The working set under each TTL, over the trace's span, from one pass over the runs (and
    one more per TTL with fewer event times than ``series_points``).

    Args:
        trace: the block trace.
        ttls: idle TTLs in seconds (None: no TTL, everything ever seen is held).
        bytes_per_token: KV bytes per token of the serving model (None: tokens only).
        series_points: number of time buckets of the downsampled series (0: no series).
        requests: requests per chunk of the passes over the trace (the result does not
            depend on it).
        each_chunk: called with every chunk of runs of the first pass (another analysis that
            reads the same runs in the same pass).

    Returns:
        Per TTL ``{mean_tokens, p99_tokens, peak_tokens, peak_at, mean_bytes, p99_bytes,
        peak_bytes, series}``: mean and p99 are time-weighted over the span from the first to the
        last request; the series holds per bucket the time-mean and the maximum, in tokens.
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
        return [dict(empty) for _ in ttls]
    taus = [seconds_to_us(ttl) for ttl in ttls]
    t = ts_us(trace)
    t0, t1 = int(t[0]), int(t[-1])
    span = float(t1 - t0)
    acc = [_Level(t0, t1, series_points) for _ in taus]
    for c, per in _steps(trace, taus, requests):
        if each_chunk is not None:
            each_chunk(c)
        for a, (held, times, level, dur) in zip(acc, per):
            a.add(c.lo, held, times, level, dur)
    # the level held 99% of the time (over a span of 0: the peak)
    p99 = [float(a.p99.result()) if a.p99 is not None else float(a.peak) for a in acc]
    out = []
    for k, a in enumerate(acc):
        w = {
            "mean_tokens": (a.area / span if span > 0 else float(a.peak)) * B,
            "p99_tokens": int(round(p99[k])) * B,
            "peak_tokens": a.peak * B,
            "peak_at": _iso(t[a.peak_i]),
        }
        for key in ("mean", "p99", "peak"):
            w[f"{key}_bytes"] = None if bytes_per_token is None else w[f"{key}_tokens"] * float(bytes_per_token)
        if series_points and a.events < series_points:
            # fewer event times than buckets: a bucket per event time
            a.series = _Series(t0, t1, a.events)
            for _, [(_, times, level, dur)] in _steps(trace, [taus[k]], requests):
                a.series.add(times, level, dur)
        w["series"] = a.series.result(B) if series_points else None
        out.append(w)
    return out


class _Level:
    """One TTL's working set over the pass: its peak, its time integral (summed in event order
    from the start, so no chunking changes a bit of it), its event count, its p99 over time and
    its series."""

    def __init__(self, t0: int, t1: int, series_points: int) -> None:
        self.peak, self.peak_i, self.area, self.events = -1, 0, 0.0, 0
        span = float(t1 - t0)
        self.p99 = TopQuantile(span, 0.99 * span) if span > 0 else None
        self.series = _Series(t0, t1, series_points) if series_points else None

    def add(self, lo: int, held, times, level, dur) -> None:
        k = int(np.argmax(held))
        if int(held[k]) > self.peak:
            self.peak, self.peak_i = int(held[k]), lo + k
        self.area = float(np.cumsum(np.concatenate(([self.area], level * dur)))[-1])
        self.events += len(level)
        if self.p99 is not None:
            self.p99.add(level, dur)
        if self.series is not None:
            self.series.add(times, level, dur)


class _Series:
    """Per bucket of the span the time-mean and the maximum held blocks (peaks survive
    downsampling), from the step function given piece by piece in time order (``add``)."""

    def __init__(self, t0: int, t1: int, points: int) -> None:
        points = max(1, points)
        self.t0 = t0
        self.edges = np.linspace(t0, t1, points + 1) if t1 > t0 else np.array([t0, t0 + 1.0])
        self.points = len(self.edges) - 1
        self.at_edge = np.zeros(len(self.edges))  # integral of the step function up to each edge
        self.mx = np.zeros(self.points)
        self.done = 0  # edges whose last event at or before them is known
        self.integral = 0.0  # up to the next event
        self.prev: tuple[int, int, float] | None = None  # the last event: time, level, integral before it

    def add(self, times: np.ndarray, level: np.ndarray, dur: np.ndarray) -> None:
        if not len(times):
            return
        edges, prev = self.edges, self.prev
        before = np.cumsum(np.concatenate(([self.integral], level * dur)))
        self.integral = float(before[-1])
        # edges before this piece's last event: their last event at or before them is known
        upto = int(np.searchsorted(edges, times[-1], side="left"))
        if upto > self.done:
            e = edges[self.done : upto]
            k = np.searchsorted(times, e, side="right") - 1
            kk = np.maximum(k, 0)
            at = before[kk] + level[kk] * (e - times[kk])
            carried = level[kk].astype(np.float64)
            first = (k < 0) & (prev is not None)  # before this piece: the previous piece's last event
            if first.any():
                at[first] = prev[2] + prev[1] * (e[first] - prev[0])
                carried[first] = prev[1]
            self.at_edge[self.done : upto] = at
            b = np.arange(self.done, upto)
            inside = b < self.points
            # the level carried into each bucket that starts at one of these edges
            self.mx[b[inside]] = np.maximum(self.mx[b[inside]], carried[inside])
            self.done = upto
        self.prev = (int(times[-1]), int(level[-1]), float(before[-2]))
        bucket = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, self.points - 1)
        # times are in order, so each bucket's events are a slice: its maximum by reduceat
        starts = np.flatnonzero(np.append(True, bucket[1:] != bucket[:-1]))
        b = bucket[starts]
        self.mx[b] = np.maximum(self.mx[b], np.maximum.reduceat(level, starts))

    def result(self, B: int) -> dict:
        prev, done = self.prev, self.done
        if done < len(self.edges) and prev is not None:
            e = self.edges[done:]
            self.at_edge[done:] = prev[2] + prev[1] * (e - prev[0])
            b = np.arange(done, len(self.edges))
            inside = b < self.points
            self.mx[b[inside]] = np.maximum(self.mx[b[inside]], prev[1])
            self.done = len(self.edges)
        width = np.diff(self.edges)
        mean = np.diff(self.at_edge) / width
        return {
            "t0": _iso(self.t0),
            "step_s": float(width[0]) / 1e6,
            "mean_tokens": [round(float(x) * B, 1) for x in mean],
            "max_tokens": [int(x) * B for x in self.mx],
        }


def _iso(us: int | float) -> str:
    # numpy, not datetime: any stored time (a year beyond 9999 too) has an ISO form
    return str(np.datetime64(int(us), "us").astype("datetime64[s]")) + "Z"
