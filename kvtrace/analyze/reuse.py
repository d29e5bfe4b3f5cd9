"""Reuse profile: how soon blocks come back, and how threads pause, resume and compact.

Two reuse times per block access that is not a block's first:

- ``reuse_time``: the block's age, the time since its last access (any request).
- ``effective_reuse_time``: the running maximum of the ages along the request up to that block.
  A prefix cache serves a block only if every block before it is served too, so this is the
  age an idle TTL must cover for the access to hit: the share of it within a TTL is the share
  of the unlimited-TTL hits that TTL keeps.

Distributions are token-weighted (each access weighs the prompt tokens it carries), with
block-weighted shares beside them. Threads (a session's main conversation or one subagent)
come from the trace's sessions: telemetry-derived traces have them, Bailian traces group chats
by their root, Mooncake traces have none.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from kvtrace.analyze import spill
from kvtrace.analyze.access import (
    CHUNK_REQUESTS,
    NEVER,
    WeightAtOrBelow,
    compact_dtype,
    compact_ints,
    run_chunks,
    ts_us,
)
from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.quantile import LogHistogram, linear_quantiles, smallest_reaching

CDF_POINTS_S = (1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400, 172800, 604800)
WITHIN = {"1m": 60, "5m": 300, "1h": 3600}
CAPTURE = (0.9, 0.95, 0.99)
# Requests of the thread table's per-thread steps at a time (whole threads; the table does not
# depend on it).
THREAD_SLICE_ROWS = 2**20
MAX_THREAD_SLICES = 32


@dataclass
class ReuseParams:
    """Parameters of the reuse profile (each one an option of ``kvtrace reuse``)."""

    idle_s: float = field(
        default=300.0,
        metadata={
            "help": "A gap between two requests of a thread longer than this is an idle period; the request "
            "after it is a resumption (default: the 5 min API cache TTL)."
        },
    )
    cdf_points_s: tuple[float, ...] = field(
        default=CDF_POINTS_S,
        metadata={"help": "Reuse times (seconds) at which the cumulative distributions are given."},
    )
    top_threads: int = field(default=10, metadata={"help": "Threads listed individually, largest prompt first."})

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in fields(cls)}


class _Distribution:
    """The distribution of one of the runs' times (``age`` or ``eff_age``), token- and
    block-weighted, filled chunk by chunk (:meth:`add`), finished by :meth:`result`."""

    def __init__(self, which: str, p: ReuseParams) -> None:
        self.which, self.p = which, p
        self.limits_s = sorted({float(t) for t in p.cdf_points_s} | {float(v) for v in WITHIN.values()})
        self.within = WeightAtOrBelow([int(round(t * 1e6)) for t in self.limits_s])
        self.hist = LogHistogram()

    def pairs(self, c) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = getattr(c.times, self.which)
        ok = a < NEVER
        return a[ok], c.runs.tokens[ok], c.runs.blocks[ok]

    def add(self, c) -> None:
        a, tw, bw = self.pairs(c)
        self.within.add(a, tw, bw)
        self.hist.add(a, tw)

    QS = sorted({0.5, 0.9, 0.99, *CAPTURE})

    def targets(self) -> list[float]:
        """The cumulative weights whose ages the quantiles are."""
        T = float(self.within.tokens.sum())
        return [q * T - 1e-9 * T for q in self.QS] if T else []

    def result(self, found: list[int | None], total_tokens: int) -> dict:
        """``found``: the smallest ages reaching :meth:`targets`, in µs."""
        T, Bt = float(self.within.tokens.sum()), float(self.within.blocks.sum())
        within_t, within_b = self.within.at_or_below()

        def share(limit_s: float) -> tuple[float, float]:
            k = self.limits_s.index(float(limit_s))
            return (float(within_t[k] / T) if T else 0.0), (float(within_b[k] / Bt) if Bt else 0.0)

        by_q = {q: (v / 1e6 if v is not None else None) for q, v in zip(self.QS, found)}
        cdf = []
        for t in self.p.cdf_points_s:
            st, sb = share(t)
            cdf.append({"t_s": float(t), "share_tokens": st, "share_blocks": sb})
        return {
            "reused_tokens": int(T),
            "reused_blocks": int(Bt),
            "share_of_prompt_tokens": float(T / total_tokens) if total_tokens else 0.0,
            "cdf": cdf,
            "within": {k: share(v)[0] for k, v in WITHIN.items()},
            "within_blocks": {k: share(v)[1] for k, v in WITHIN.items()},
            "quantiles_s": {f"p{int(q * 100)}": by_q.get(q) for q in (0.5, 0.9, 0.99)},
            "ttl_for_share_s": {str(q): by_q.get(q) for q in CAPTURE},
        }


def reuse_profile(trace: BlockTrace, params: ReuseParams | None = None, requests: int = CHUNK_REQUESTS) -> dict:
    """The reuse profile of a block trace (a JSON-ready dict).

    Args:
        trace: the block trace.
        params: the profile's parameters.
        requests: requests per chunk of the passes over the runs (the result does not depend on it).

    Returns:
        ``trace`` (sizes and span), ``reuse_time`` and ``effective_reuse_time`` (each with
        ``cdf`` points, ``within`` 1m/5m/1h shares, ``quantiles_s`` and ``ttl_for_share_s``:
        the TTL that captures 90/95/99% of the reuse), and ``threads`` (None without sessions).
    """
    p = params or ReuseParams()
    total = spill.total(trace.input_length)
    t = ts_us(trace)
    age, eff = _Distribution("age", p), _Distribution("eff_age", p)
    unique, same = 0, True
    for c in run_chunks(trace, requests):
        runs = c.runs
        unique += int(runs.blocks[~runs.dup & (runs.prev < 0)].sum())
        age.add(c)
        eff.add(c)
        # In prefix-chained traces a request's ages rarely rise along its blocks: then the two
        # distributions are one, read exactly once.
        same = same and np.array_equal(c.times.age, c.times.eff_age)
    info = {
        "name": trace.name,
        "derived": "chain" in trace.meta,
        "requests": trace.n_requests,
        "blocks": trace.n_blocks,
        "block_size": trace.block_size,
        "prompt_tokens": total,
        "output_tokens": spill.total(trace.output_length),
        "unique_blocks": unique,
        "span_s": float(t[-1] - t[0]) / 1e6 if len(t) else 0.0,
    }
    dists = [age] if same else [age, eff]
    pieces = lambda: ([d.pairs(c)[:2] for d in dists] for c in run_chunks(trace, requests))  # noqa: E731
    found = smallest_reaching(pieces, [d.targets() for d in dists], [d.hist for d in dists])
    reuse = age.result(found[0], total)
    return {
        "trace": info,
        "reuse_time": reuse,
        "effective_reuse_time": reuse if same else eff.result(found[1], total),
        "threads": thread_summary(trace, p),
    }


def thread_table(trace: BlockTrace, params: ReuseParams | None = None, slice_rows: int = THREAD_SLICE_ROWS):
    """One row per thread: requests, span, gaps, idle periods, resumptions, compactions, chains.

    Returns:
        A Polars frame, or None when the trace has no sessions.
    """
    got = _threads(trace, params or ReuseParams(), slice_rows)
    return got[0] if got is not None else None


def _threads(trace: BlockTrace, p: ReuseParams, slice_rows: int = THREAD_SLICE_ROWS):
    """The thread table, and every gap between two requests of a thread (seconds), or None."""
    import polars as pl

    thread = trace.meta.get("thread", trace.session)
    if thread is None or trace.n_requests == 0:
        return None
    n = trace.n_requests
    t = ts_us(trace)
    thread = np.asarray(thread)
    session = np.asarray(trace.session if trace.session is not None else thread)
    compaction = trace.meta.get("compaction")
    chain = trace.meta.get("chain")
    idle_us = int(round(p.idle_s * 1e6))
    # Threads a slice at a time, each slice a range of thread codes of about slice_rows requests
    # (a longer thread alone): only a slice's rows are ever gathered in thread order.
    # At most MAX_THREAD_SLICES: each slice is a pass over every request's code.
    slice_rows = max(1, slice_rows, -(-n // MAX_THREAD_SLICES))
    if spill.spilled(thread):  # a derived trace's codes, dense: counted a range at a time
        counts = np.zeros(0, dtype=np.int64)
        for lo, hi in spill.ranges(n):
            got = np.bincount(spill.read(thread, lo, hi))
            counts = np.pad(counts, (0, max(0, len(got) - len(counts))))
            counts[: len(got)] += got
        values = np.flatnonzero(counts)
        counts = counts[values]
    else:
        values, counts = np.unique(thread, return_counts=True)
    ends = np.cumsum(counts)
    gaps, at = spill.empty(n - len(counts), np.int64), 0  # µs: a gap per request but each thread's first
    del counts
    firsts = np.unique(np.searchsorted(ends, np.arange(0, n, slice_rows), side="right"))
    edges = [*values[firsts].tolist(), None]
    del values, ends, firsts
    # One integer type for every slice (a slice's own would differ where codes pass 2**31).
    code_type = {"thread": compact_dtype(thread), "session": compact_dtype(session)}
    tabs = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        rows = []
        for r0, r1 in spill.ranges(n):  # the slice's rows, found a range of the codes at a time
            code = spill.read(thread, r0, r1)
            rows.append(r0 + np.flatnonzero((code >= lo) if hi is None else ((code >= lo) & (code < hi))))
        rows = np.concatenate(rows)
        del code
        rows = rows[np.argsort(thread[rows], kind="stable")]  # by thread, then time
        cols = {"thread": thread[rows].astype(code_type["thread"]), "ts_us": t[rows]}
        cols["session"] = session[rows].astype(code_type["session"])
        cols["prompt"] = trace.input_length[rows]  # 64 bits: a thread's sum may pass 2**31
        cols["compaction"] = compaction[rows] if compaction is not None else np.zeros(len(rows), bool)
        cols["chain"] = compact_ints(chain[rows]) if chain is not None else np.zeros(len(rows), np.int32)
        del rows
        spill.release(thread, session, trace.input_length, compaction, chain)  # the pages the gathers touched
        # Gaps to the thread's previous request (NaN at a thread's first): numpy's division,
        # correctly rounded (Polars' may multiply by the reciprocal, differently by frame size).
        same = cols["thread"][1:] == cols["thread"][:-1]
        got = (cols["ts_us"][1:] - cols["ts_us"][:-1])[same]  # in thread, then time order
        gap = np.full(len(same) + 1, np.nan)
        gap[1:][same] = got / 1e6
        spill.put(gaps, at, got)
        at += len(got)
        del got, same
        df = pl.DataFrame(cols).with_columns(gap=pl.Series(gap, nan_to_null=True))
        del cols, gap
        df = df.with_columns(resumed=pl.col("gap") > idle_us / 1e6)
        tabs.append(
            df.group_by("thread", maintain_order=True).agg(
                pl.col("session").first(),
                pl.len().alias("requests"),
                (pl.col("ts_us").max() - pl.col("ts_us").min()).alias("span_us"),
                pl.col("gap").median().alias("median_gap_s"),
                pl.col("gap").max().alias("max_gap_s"),
                pl.col("resumed").sum().alias("idle_periods"),
                pl.col("gap").filter(pl.col("resumed")).sum().alias("idle_s"),
                pl.col("prompt").filter(pl.col("resumed")).sum().alias("resumed_prompt_tokens"),
                pl.col("compaction").sum().alias("compactions"),
                pl.col("chain").n_unique().alias("chains"),
                pl.col("prompt").sum().alias("prompt_tokens"),
            )
        )
        del df
    assert at == len(gaps)
    tab = pl.concat(tabs)
    del tabs
    # numpy's division, correctly rounded (Polars' large group-bys multiply by the reciprocal)
    span_s = tab.get_column("span_us").to_numpy() / 1e6
    tab = tab.with_columns(span_us=pl.Series(span_s)).rename({"span_us": "span_s"})
    names = trace.meta.get("thread_names")
    if names is not None:
        labels = pl.Series("name", names.take(tab.get_column("thread").to_arrow()), dtype=pl.Utf8)
        tab = tab.with_columns(labels)
    # ties in the order threads first appear, so the table never depends on the sort's threads
    return tab.sort(["prompt_tokens", "thread"], descending=[True, False]), spill.frozen(gaps)


def thread_summary(trace: BlockTrace, params: ReuseParams | None = None) -> dict | None:
    """Threads and sessions in aggregate: gaps, idle periods, resumptions, compactions."""
    import polars as pl

    p = params or ReuseParams()
    got = _threads(trace, p)
    if got is None:
        return None
    tab, gaps = got

    def q(a, x):
        return float(np.quantile(a, x)) if len(a) else None

    # every gap of every thread, exactly as np.quantile would give them, from the gaps on disk
    gap_q = linear_quantiles(gaps, [0.5, 0.9, 0.99], scale=1e6)
    del gaps
    top = tab.head(p.top_threads).drop("thread").to_dicts()
    return {
        "threads": tab.height,
        "sessions": int(tab.get_column("session").n_unique()),
        "requests_per_thread": {
            "p50": q(tab["requests"].to_numpy(), 0.5),
            "p90": q(tab["requests"].to_numpy(), 0.9),
            "max": int(tab["requests"].max()),
        },
        "gap_s": dict(zip(("p50", "p90", "p99"), gap_q)),
        "idle_threshold_s": p.idle_s,
        "idle_periods": int(tab["idle_periods"].sum()),
        "idle_s": float(tab["idle_s"].fill_null(0).sum()),
        "resumptions": int(tab["idle_periods"].sum()),
        "resumed_prompt_tokens": int(tab["resumed_prompt_tokens"].fill_null(0).sum()),
        "compactions": int(tab["compactions"].sum()),
        "chains": int(tab.select(pl.col("chains").sum()).item()),
        "top": top,
    }
