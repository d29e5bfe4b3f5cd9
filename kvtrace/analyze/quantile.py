"""Exact weighted quantiles of values that arrive in pieces.

A quantile here is the smallest value ``a`` whose cumulative weight ``W(<= a)`` reaches a
target: what a stable sort and a cumulative sum give, found without holding every value. One
pass counts weight in a histogram of logarithmic bins (a bin spans 1/256 of its values'
magnitude); each target's bin is then read exactly in a second pass (its values collected and
sorted), or narrowed by further histogram passes while it holds too many values to collect.
Weights are counts of tokens or microseconds: sums of them are exact in float64 below 2**53.

The histogram's memory does not grow with the values. A quantile near the top of a total known
in advance (a p99 of time) needs no second pass: :class:`TopQuantile` keeps only the values that
can still be the answer, which are as many as the values in the top share of the weight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

_BITS = 8  # bits of a value kept by its log bin below the leading one
_LINEAR = 1 << (_BITS + 1)  # values below this have a bin each
_COLLECT = 4_000_000  # values a bin may hold to be read whole
_WIDE = 4096  # bins of a narrowing pass


def _log_bin_range(b: int) -> tuple[int, int]:
    """The values ``[lo, hi]`` of a log bin."""
    if b < _LINEAR:
        return b, b
    e = b // (1 << _BITS) + _BITS - 1
    top = b % (1 << _BITS) + (1 << _BITS)
    shift = e - (_BITS + 1)
    return top << shift, ((top + 1) << shift) - 1


class LogHistogram:
    """Weight and count of values per log bin: the first pass of :func:`smallest_reaching`,
    which a caller may fill in a pass of its own."""

    def __init__(self) -> None:
        self.weight = np.zeros(0)
        self.count = np.zeros(0, dtype=np.int64)

    def add(self, v: np.ndarray, w: np.ndarray) -> None:
        from kvtrace.analyze._kernels import log_bins

        if v.dtype.kind not in "iu":
            raise TypeError(f"log-histogram values are integers, not {v.dtype}")
        b = np.empty(len(v), dtype=np.int64)
        most = log_bins(v, _BITS, b)
        size = max(len(self.weight), most + 1 if len(b) else 0)
        if size > len(self.weight):
            self.weight = np.pad(self.weight, (0, size - len(self.weight)))
            self.count = np.pad(self.count, (0, size - len(self.count)))
        self.weight += np.bincount(b, weights=w, minlength=size)
        self.count += np.bincount(b, minlength=size)


def smallest_reaching(
    pieces: Callable[[], Iterable[list[tuple[np.ndarray, np.ndarray]]]],
    targets: list[list[float]],
    hists: list[LogHistogram] | None = None,
) -> list[list[int | None]]:
    """For each target weight ``x`` of each series of ``(value, weight)`` pairs, the smallest
    value ``a`` with ``W(<= a) >= x``; several series at once, their exact reads sharing passes.

    Args:
        pieces: called once per pass; yields a list of ``(values, weights)`` arrays, one per
            series (values int64 >= 0, weights >= 0): the same pairs on every call, in any pieces.
        targets: per series, the weights to reach.
        hists: per series, its :class:`LogHistogram` when the caller filled it in a pass of its
            own (else a pass here fills them).

    Returns:
        Per series, the values in the order of its targets (None where its total weight stays
        below).
    """
    if hists is None:
        hists = [LogHistogram() for _ in targets]
        for pairs in pieces():
            for h, (v, w) in zip(hists, pairs):
                h.add(v, w)
    out: list[list[int | None]] = [[None] * len(ts) for ts in targets]
    # Per open (series, target): the value range that holds its answer, the weight below it, its count.
    open_: dict[tuple[int, int], tuple[int, int, float, int]] = {}
    for j, (ts, hist) in enumerate(zip(targets, hists)):
        cum = np.cumsum(hist.weight)
        for k, x in enumerate(ts):
            if not len(cum) or cum[-1] < x:
                continue
            # the first bin whose weight reaches x (for x <= 0: the first bin that holds a value)
            b = int(np.searchsorted(cum, x, side="left")) if x > 0 else int(np.flatnonzero(hist.count)[0])
            lo, hi = _log_bin_range(b)
            if lo == hi:
                out[j][k] = lo
            else:
                open_[j, k] = (lo, hi, float(cum[b - 1]) if b else 0.0, int(hist.count[b]))
    while open_:
        collect = {jk: r for jk, r in open_.items() if r[3] <= _COLLECT}
        narrow = {jk: r for jk, r in open_.items() if r[3] > _COLLECT}
        got = {jk: ([], []) for jk in collect}
        wide = {jk: (np.zeros(_WIDE), np.zeros(_WIDE, dtype=np.int64)) for jk in narrow}
        for pairs in pieces():
            for (j, k), (lo, hi, _, _) in collect.items():
                v, w = pairs[j]
                sel = (v >= lo) & (v <= hi)
                got[j, k][0].append(v[sel])
                got[j, k][1].append(w[sel])
            for (j, k), (lo, hi, _, _) in narrow.items():
                v, w = pairs[j]
                width = -(-(hi - lo + 1) // _WIDE)
                sel = (v >= lo) & (v <= hi)
                b = (v[sel] - lo) // width
                wide[j, k][0][:] += np.bincount(b, weights=w[sel], minlength=_WIDE)
                wide[j, k][1][:] += np.bincount(b, minlength=_WIDE)
        for (j, k), (lo, hi, below, _) in collect.items():
            v, w = np.concatenate(got[j, k][0]), np.concatenate(got[j, k][1])
            order = np.argsort(v, kind="stable")
            c = below + np.cumsum(w[order])
            i = int(np.searchsorted(c, targets[j][k], side="left"))
            out[j][k] = int(v[order][min(i, len(v) - 1)])
            del open_[j, k]
        for (j, k), (lo, hi, below, _) in narrow.items():
            width = -(-(hi - lo + 1) // _WIDE)
            c = below + np.cumsum(wide[j, k][0])
            b = int(np.searchsorted(c, targets[j][k], side="left"))
            nlo, nhi = lo + b * width, min(hi, lo + (b + 1) * width - 1)
            nbelow = float(c[b - 1]) if b else below
            if nlo == nhi:
                out[j][k] = nlo
                del open_[j, k]
            else:
                open_[j, k] = (nlo, nhi, nbelow, int(wide[j, k][1][b]))
    return out


def linear_quantiles(values: np.ndarray, qs: list[float], scale: float = 1.0) -> list[float | None]:
    """``np.quantile(values / scale, qs)`` (its default, linear method) to the bit, for integer
    ``values >= 0`` that may be on disk (``kvtrace.analyze.spill``): only the order statistics
    each quantile interpolates between are found (:func:`smallest_reaching`, a range at a time),
    and numpy interpolates between them as it would over the whole. None for no values."""
    from kvtrace.analyze.spill import ranges, read

    m = len(values)
    if not m:
        return [None] * len(qs)
    spots = []
    for q in qs:
        v = (m - 1) * q  # numpy's virtual index, in its float arithmetic
        i = int(np.floor(v))
        spots.append((i, min(i + 1, m - 1), v - i))
    ranks = sorted({r for i, j, _ in spots for r in (i, j)})

    def pieces():
        for lo, hi in ranges(m):
            yield [(read(values, lo, hi), np.ones(hi - lo))]

    found = dict(zip(ranks, smallest_reaching(pieces, [[r + 1 for r in ranks]])[0]))
    # between two values, at the same fraction: numpy's own interpolation of the pair
    return [float(np.quantile(np.array([found[i] / scale, found[j] / scale]), g)) for i, j, g in spots]


# Values a TopQuantile buffers before it drops those that can no longer be its answer.
TOP_BUFFER = 1 << 20


class TopQuantile:
    """The smallest value ``a`` with ``W(<= a) >= target`` (as :func:`smallest_reaching` finds
    it) in one pass, for a ``target`` near the top of a ``total`` weight known in advance.

    ``W(<= a)`` is ``total - W(> a)``, and weight seen so far can only add to ``W(> a)``: once a
    value has too much weight above it to reach the target, neither it nor any smaller value can
    be the answer, and they are dropped. What stays is the values with less than ``total -
    target`` of weight above them: for the working set's p99, the levels of the top 1% of the
    time. The buffer doubles when that many stay, so the sorts stay O(n log n) in all.

    Weights must be integers (µs, tokens): their sums are exact in float64 below 2**53, and the
    weights added must sum to ``total`` exactly.
    """

    def __init__(self, total: float, target: float, buffer: int = TOP_BUFFER) -> None:
        """``buffer``: values held before those that cannot be the answer are dropped (the
        result does not depend on it)."""
        self.total, self.target, self.buffer = float(total), float(target), buffer
        self.floor: int | None = None  # no value at or below this one can be the answer
        self.values: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []
        self.held = 0
        self.seen = 0.0  # weight added, checked against `total` at the end

    def add(self, v: np.ndarray, w: np.ndarray) -> None:
        self.seen += float(w.sum())
        if self.floor is not None:
            keep = v > self.floor
            v, w = v[keep], w[keep]
        self.values.append(np.array(v, dtype=np.int64))  # a copy: never a view of the caller's buffer
        self.weights.append(np.array(w, dtype=np.float64))
        self.held += len(v)
        if self.held > self.buffer:
            self._compact()
            self.buffer = max(self.buffer, 2 * self.held)  # many still qualify: compact less often

    def _compact(self) -> tuple[np.ndarray, np.ndarray]:
        """Merge the buffer into distinct values (ascending) and whether each reaches the target;
        drop the values below the first that does."""
        v = np.concatenate(self.values) if self.values else np.zeros(0, dtype=np.int64)
        w = np.concatenate(self.weights) if self.weights else np.zeros(0)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        starts = np.flatnonzero(np.append(True, v[1:] != v[:-1])) if len(v) else np.zeros(0, dtype=np.int64)
        u = v[starts]
        wu = np.add.reduceat(w, starts) if len(v) else np.zeros(0)
        above = np.concatenate((np.cumsum(wu[::-1])[::-1][1:], [0.0]))  # weight of larger values
        reaches = self.total - above >= self.target
        first = int(np.argmax(reaches)) if reaches.any() else len(u)
        if first > 0:
            self.floor = int(u[first - 1])
        u, wu, reaches = u[first:], wu[first:], reaches[first:]
        self.values, self.weights, self.held = [u], [wu], len(u)
        return u, reaches

    def result(self) -> int | None:
        """The value (None when the total stays below the target)."""
        if self.seen != self.total:
            raise ValueError(f"weights added ({self.seen}) differ from the total given ({self.total})")
        u, reaches = self._compact()
        return int(u[0]) if len(u) and reaches[0] else None
