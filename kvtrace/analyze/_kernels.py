"""Compiled loops (numba, cached on disk): the steps that are sequential by nature (linking
block accesses and prefix chains, writing a derived trace's block ids), and per-request steps
whose numpy form would hold several temporaries of every request (a derived trace's runs and
their times, cache reads under a TTL, per-model sums). Everything else in reuse analytics is
vectorized numpy over runs of blocks.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def link_runs(ids, offsets, n_ids, prev):  # pragma: no cover - compiled
    """Group block accesses into runs: consecutive blocks of a request with the same previous
    access (the request that touched the block before, -1 if none), the same next access and
    the same ``dup`` flag (a repeat of a block within one request).

    Three passes over the blocks: forward for each block's previous access (into ``prev``, a
    scratch array of ``len(ids)``), backward to count runs, backward again to fill them; so the
    only per-block memory is ``prev`` and a bit per block.

    Args:
        ids: dense block ids in ``[0, n_ids)``, requests in time order (CSR by ``offsets``).

    Returns:
        ``(req, first, blocks, prev, next, dup)`` per run, in request then block order.
    """
    n = len(offsets) - 1
    N = len(ids)
    last = np.full(n_ids, -1, dtype=prev.dtype)  # int32 while request indexes fit
    before = np.full(n_ids, -1, dtype=prev.dtype)
    dup = np.zeros(N, dtype=np.bool_)
    widest = 0
    for i in range(n):
        widest = max(widest, offsets[i + 1] - offsets[i])
        for k in range(offsets[i], offsets[i + 1]):
            b = ids[k]
            p = last[b]
            if p == i:  # seen earlier in this very request
                prev[k] = before[b]
                dup[k] = True
            else:
                before[b] = p
                prev[k] = p
                last[b] = i
    nxt = np.empty(widest, dtype=np.int64)
    count = 0
    for sweep in range(2):
        if sweep == 1:
            r_req = np.empty(count, dtype=np.int64)
            r_first = np.empty(count, dtype=np.int64)
            r_blocks = np.empty(count, dtype=np.int64)
            r_prev = np.empty(count, dtype=np.int64)
            r_next = np.empty(count, dtype=np.int64)
            r_dup = np.empty(count, dtype=np.bool_)
            at = count
        last[:] = -1
        for i in range(n - 1, -1, -1):
            s, e = offsets[i], offsets[i + 1]
            for k in range(s, e):
                nxt[k - s] = last[ids[k]]
            for k in range(s, e):
                last[ids[k]] = i
            runs_here = 0
            for k in range(s, e):
                if k == s or prev[k] != prev[k - 1] or nxt[k - s] != nxt[k - s - 1] or dup[k] != dup[k - 1]:
                    runs_here += 1
            if sweep == 0:
                count += runs_here
                continue
            at -= runs_here
            r = at - 1
            for k in range(s, e):
                if k == s or prev[k] != prev[k - 1] or nxt[k - s] != nxt[k - s - 1] or dup[k] != dup[k - 1]:
                    r += 1
                    r_req[r], r_first[r], r_blocks[r] = i, k - s, 0
                    r_prev[r], r_next[r], r_dup[r] = prev[k], nxt[k - s], dup[k]
                r_blocks[r] += 1
    if count == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z, z, np.zeros(0, dtype=np.bool_)
    return r_req, r_first, r_blocks, r_prev, r_next, r_dup


@numba.njit(cache=True, nogil=True)
def chain_ids(order, offsets, chain_prev, head_blocks, head_base, inherit, out):  # pragma: no cover
    """Write the block ids of derived prefix chains.

    Requests are visited in ``order`` (chain by chain, in time), so a request's chain predecessor
    is written before it. Request ``g``'s blocks ``[0, head_blocks[g])`` take the shared head ids
    ``head_base[g] + k``; blocks ``[head_blocks[g], inherit[g])`` copy the predecessor's ids; the
    rest get new ids, numbered after every head id.
    """
    fresh = 0
    for j in range(len(head_base)):
        if head_blocks[j] > 0 and head_base[j] + head_blocks[j] > fresh:
            fresh = head_base[j] + head_blocks[j]
    for t in range(len(order)):
        g = order[t]
        o = offsets[g]
        n = offsets[g + 1] - o
        h = min(head_blocks[g], n)
        for k in range(h):
            out[o + k] = head_base[g] + k
        p = chain_prev[g]
        upto = min(inherit[g], n)
        k = h
        if p >= 0:
            po = offsets[p]
            while k < upto:
                out[o + k] = out[po + k]
                k += 1
        while k < n:
            out[o + k] = fresh
            fresh += 1
            k += 1


@numba.njit(cache=True, nogil=True)
def link_chains(
    order, session, key, n_keys, model, read, cached, prompt, ts, read_ttl, stop_after, force_start, window, pred, depth
):  # pragma: no cover - compiled
    """Find each request's chain predecessor (``pred``, -1 for a chain start) and the tokens it
    shares with it (``depth``), in place.

    Requests are visited in ``order`` (by session, then time). A request continues, most recent
    first among its session's last ``window`` requests of its model (any thread), one whose
    cached prefix equals exactly what this request read: the provider's own evidence, a *strong*
    link sharing that whole prefix. Else it continues its key's previous request (a *weak* link):
    sharing only what it read if that request is younger than its ``read_ttl`` (its cache was
    still there, so a shorter read means a shorter shared prefix: a rewrite, a shrink), else
    that request's whole cached prefix if the prompt holds it. When the key's previous request
    was continued by another thread's request (a subagent that extends the main prompt), the
    end of that chain (within ``window`` steps) stands for it. A strong link may take a
    predecessor from a weak one (which then starts a chain): parallel subagents reported under
    one thread id interleave, and only their reads tell them apart. Requests of another model,
    and chains whose last request was a compaction, are not continued.
    """
    n = len(pred)
    succ = np.full(n, -1, dtype=np.int64)
    strong = np.zeros(n, dtype=np.bool_)
    last = np.full(n_keys, -1, dtype=np.int64)
    win = np.empty(window, dtype=np.int64)
    n_win = 0
    cur = -1
    for t in range(len(order)):
        i = order[t]
        if session[i] != cur:
            cur = session[i]
            n_win = 0
        p = -1
        d = 0
        matched = False
        if not force_start[i]:
            if read[i] > 0:
                for j in range(n_win - 1, -1, -1):
                    c = win[j]
                    if (
                        cached[c] == read[i]
                        and model[c] == model[i]
                        and not stop_after[c]
                        and not (succ[c] >= 0 and strong[c])
                    ):
                        p = c
                        d = cached[c]
                        if succ[c] >= 0:
                            pred[succ[c]] = -1  # the weak successor starts a chain instead
                            depth[succ[c]] = 0
                        strong[c] = True
                        matched = True
                        break
            c = last[key[i]]
            hops = 0
            while c >= 0 and succ[c] >= 0 and hops < window:  # the conversation went on in another thread
                c = succ[c]
                hops += 1
            free = not matched and c >= 0 and succ[c] < 0 and model[c] == model[i] and not stop_after[c]
            if p < 0 and free and cached[i] > 0 and read[i] < cached[c] and ts[i] - ts[c] <= read_ttl[c]:
                p = c  # the thread's previous request, as deep as the read
                d = read[i]
            if not matched and p < 0 and read[i] > 0:
                # The live request of the session that cached the least beyond the read.
                for j in range(n_win - 1, -1, -1):
                    b = win[j]
                    if (
                        succ[b] < 0
                        and model[b] == model[i]
                        and not stop_after[b]
                        and cached[b] >= read[i]
                        and ts[i] - ts[b] <= read_ttl[b]
                        and (p < 0 or cached[b] < cached[p])
                    ):
                        p = b
                d = read[i] if p >= 0 else 0
            if p < 0 and free and prompt[i] >= cached[c]:
                p = c  # append-only: no read says otherwise
                d = cached[c]
            if d <= 0:
                p = -1
            elif not matched:
                strong[p] = False
        pred[i] = p
        depth[i] = d
        if p >= 0:
            succ[p] = i
        last[key[i]] = i
        if n_win == window:
            for j in range(n_win - 1):
                win[j] = win[j + 1]
            n_win -= 1
        win[n_win] = i
        n_win += 1


@numba.njit(cache=True, nogil=True)
def chain_runs(h, inherit, by_next, chain_prev, chain_next, hprev, hnext, n_blocks):  # pragma: no cover
    """Access runs of a derived trace straight from its chain structure. A request's blocks are
    four segments (first, end, prev, next) in block order: its head, the blocks both the previous
    and the next request of its chain share, those only one of them shares, and its new blocks.
    Empty segments are skipped and neighbours with equal ``prev`` and ``next`` merged. Scalars
    only in the loop (a scratch array of segments was six times slower).

    Returns:
        ``(req, first, blocks, prev, next)`` arrays.
    """
    n = len(h)
    cap = 4 * n  # at most four runs a request
    req = np.empty(cap, dtype=np.int64)
    first = np.empty(cap, dtype=np.int64)
    blocks = np.empty(cap, dtype=np.int64)
    prev = np.empty(cap, dtype=np.int64)
    nxt = np.empty(cap, dtype=np.int64)
    k = -1
    none = np.int64(-1)
    for i in range(n):
        hh, inh, bn = np.int64(h[i]), np.int64(inherit[i]), np.int64(by_next[i])
        cp, cn = np.int64(chain_prev[i]), np.int64(chain_next[i])
        lo, hi = min(inh, bn), max(inh, bn)
        segments = (
            (np.int64(0), hh, np.int64(hprev[i]), np.int64(hnext[i])),
            (hh, lo, cp, cn),
            (lo, hi, cp if inh > bn else none, cn if bn > inh else none),
            (hi, np.int64(n_blocks[i]), none, none),
        )
        lp, ln, have = np.int64(-2), np.int64(-2), False
        for a, e, p, q in segments:
            if e > a:
                if have and p == lp and q == ln:
                    blocks[k] += e - a
                else:
                    k += 1
                    req[k], first[k], blocks[k], prev[k], nxt[k] = i, a, e - a, p, q
                lp, ln, have = p, q, True
    k += 1
    return req[:k].copy(), first[:k].copy(), blocks[:k].copy(), prev[:k].copy(), nxt[:k].copy()


@numba.njit(cache=True, nogil=True)
def run_times(t, req, prev, nxt, never, age, eff_age, next_gap):  # pragma: no cover
    """Per run (of whole requests, in request order) the time since its blocks' previous access,
    since the oldest previous access of the request's runs so far (``eff_age``), and to their
    next access; ``never`` where there is none. ``t`` is every request's time."""
    oldest, at = np.int64(0), np.int64(-1)
    for j in range(len(req)):
        r = req[j]
        now = t[r]
        p = prev[j]
        if r != at:
            at, oldest = r, p
        elif p < oldest:
            oldest = p
        age[j] = now - t[p] if p >= 0 else never
        eff_age[j] = now - t[oldest] if oldest >= 0 else never
        q = nxt[j]
        next_gap[j] = t[q] - now if q >= 0 else never


@numba.njit(cache=True, nogil=True)
def chain_read_tokens(t, lo, tau, cached, head, chain_prev, head_prev, shared, out):  # pragma: no cover
    """Per request ``lo + i`` of a derived trace (``t``: every request's time; the others: the
    range's slices), the cache-read tokens under an idle TTL of ``tau`` µs (see
    ``kvtrace.analyze.chains.chain_reads``), into ``out``; no temporary of every request."""
    for i in range(len(out)):
        got = 0
        ti = t[lo + i]
        hp = head_prev[i]
        if hp >= 0 and ti - t[hp] <= tau:
            got = min(head[i], cached[i])
        cp = chain_prev[i]
        if cp >= 0 and ti - t[cp] <= tau:
            got = max(min(shared[i], cached[i]), got)
        out[i] = got


@numba.njit(cache=True, nogil=True)
def sums_by_code(code, x, k):  # pragma: no cover
    """Exact int64 sums of ``x`` per code in ``[0, k)``, with no temporary of every row."""
    out = np.zeros(k, dtype=np.int64)
    for i in range(len(code)):
        out[code[i]] += x[i]
    return out


@numba.njit(cache=True, nogil=True)
def held_events(
    req, lo, blocks, dup, age, next_gap, tau, finite, tc, queue_t, queue_go, pending, level, held, ev_t, ev_level
):  # pragma: no cover
    """One chunk of the working set under an idle TTL ``tau`` (µs): the blocks held after each of
    the chunk's requests and its events, in time order.

    A request's live runs older than ``tau`` (or new) come in at its time; with a ``finite`` TTL,
    those whose next access is further than ``tau`` go out at its time plus ``tau``. Departures
    wait in ``queue_t``/``queue_go`` (its first ``pending`` entries are the earlier chunks'; this
    chunk's are appended, still in time order); at one time, arrivals come before departures.

    Args:
        req, blocks, dup, age, next_gap: the chunk's runs and their times; ``req`` counts from
            the trace's first request, ``lo`` is the chunk's first.
        tau, finite: the TTL in µs, and whether it is one (else nothing goes out).
        queue_t, queue_go: departure times and blocks, room for ``pending`` and one a request.
        pending: the departures queued by earlier chunks (at the front of the queue).
        tc: the chunk's request times; ``level``: blocks held before the chunk.
        held: out, blocks held right after each request.
        ev_t, ev_level: out, the event times (one per distinct time, from index 0) and the level
            after each.

    Returns:
        ``(events, level, consumed, queued)``: events written, blocks held after them, queue
        entries that went out within the chunk (up to its last time) and entries queued in all.
    """
    size = len(tc)
    come = np.zeros(size, dtype=np.int64)
    go = np.zeros(size, dtype=np.int64)
    for r in range(len(req)):
        if dup[r]:
            continue
        i = req[r] - lo
        if age[r] > tau:
            come[i] += blocks[r]
        if finite and next_gap[r] > tau:
            go[i] += blocks[r]
    q = pending
    for i in range(size):
        if go[i] > 0:
            queue_t[q] = tc[i] + tau
            queue_go[q] = go[i]
            q += 1
    j, e = 0, 0
    for i in range(size + 1):
        last = i == size
        ti = tc[size - 1] if last else tc[i]
        # departures before this request's time (at the end: up to the chunk's last time)
        while j < q and (queue_t[j] < ti or (last and queue_t[j] == ti)):
            level -= queue_go[j]
            if e > 0 and ev_t[e - 1] == queue_t[j]:
                ev_level[e - 1] = level
            else:
                ev_t[e], ev_level[e] = queue_t[j], level
                e += 1
            j += 1
        if last:
            break
        level += come[i]
        held[i] = level
        if e > 0 and ev_t[e - 1] == ti:
            ev_level[e - 1] = level
        else:
            ev_t[e], ev_level[e] = ti, level
            e += 1
    return e, level, j, q


@numba.njit(cache=True, nogil=True)
def _slot(x, bits):  # pragma: no cover - compiled
    # Fibonacci hashing: the top bits of the key times 2**64 / phi pick the slot
    return np.int64((x * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))


@numba.njit(cache=True, nogil=True)
def first_seen_codes(keys):  # pragma: no cover - compiled
    """Dense codes of 64-bit keys, numbered in order of first appearance, by one pass through an
    open-addressing hash table (doubled whenever half full, so it follows the distinct keys, not
    the rows). Returns ``(codes, first)``: each key's code, and each code's first row."""
    n = len(keys)
    bits = 10
    slot_key = np.empty(1 << bits, dtype=np.uint64)
    slot_code = np.full(1 << bits, -1, dtype=np.int64)
    codes = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    # the keys met last, by their top 8 hash bits: a key that recurs often (a shared prompt's
    # blocks) is found here, without a trip into a table larger than the cache
    near_key = np.empty(256, dtype=np.uint64)
    near_code = np.full(256, -1, dtype=np.int64)
    k = 0
    for i in range(n):
        x = np.uint64(keys[i])
        h = _slot(x, 8)
        if near_code[h] >= 0 and near_key[h] == x:
            codes[i] = near_code[h]
            continue
        mask = (1 << bits) - 1
        j = _slot(x, bits)
        while True:
            c = slot_code[j]
            if c < 0:
                slot_key[j], slot_code[j] = x, k
                codes[i], first[k] = k, i
                k += 1
                break
            if slot_key[j] == x:
                codes[i] = c
                break
            j = (j + 1) & mask
        near_key[h], near_code[h] = x, codes[i]
        if 2 * k > (1 << bits):  # half full: a table twice the size, every key placed again
            old_key, old_code = slot_key, slot_code
            bits += 1
            mask = (1 << bits) - 1
            slot_key = np.empty(1 << bits, dtype=np.uint64)
            slot_code = np.full(1 << bits, -1, dtype=np.int64)
            for s in range(len(old_code)):
                if old_code[s] >= 0:
                    j = _slot(old_key[s], bits)
                    while slot_code[j] >= 0:
                        j = (j + 1) & mask
                    slot_key[j], slot_code[j] = old_key[s], old_code[s]
    return codes, first[:k].copy()


@numba.njit(cache=True, nogil=True)
def group_order(code, k):  # pragma: no cover - compiled
    """Rows sorted by (code, row) for codes in ``[0, k)`` (a counting sort), and each row's
    predecessor within its code (-1 for the first)."""
    n = len(code)
    start = np.zeros(k + 1, dtype=np.int64)
    for i in range(n):
        start[code[i] + 1] += 1
    for c in range(k):
        start[c + 1] += start[c]
    order = np.empty(n, dtype=np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    last = np.full(k, -1, dtype=np.int64)
    for i in range(n):
        c = code[i]
        order[start[c]] = i
        start[c] += 1
        prev[i] = last[c]
        last[c] = i
    return order, prev


@numba.njit(cache=True, nogil=True)
def log_bins(v, bits, out):  # pragma: no cover - compiled
    """Monotone bin of each value >= 0 (``kvtrace.analyze.quantile``'s log bins): the value itself
    below ``2 ** (bits + 1)``, else from its bit length and the ``bits`` bits after its leading
    one. Returns the largest bin (0 when there is none)."""
    linear = 1 << (bits + 1)
    most = 0
    for i in range(len(v)):
        x = np.int64(v[i])
        if x < linear:
            b = x
        else:
            e, y = 0, x  # bit length of x
            for step in (32, 16, 8, 4, 2, 1):
                if y >> step:
                    y >>= step
                    e += step
            e += 1
            b = (e - bits + 1) * (1 << bits) + (x >> (e - (bits + 1))) - (1 << bits)
        out[i] = b
        if b > most:
            most = b
    return most


@numba.njit(cache=True, nogil=True)
def along_chains(pred, lo, start_value, out):  # pragma: no cover
    """For requests ``lo + i`` in time order: ``out[lo + i]`` is ``start_value[i]`` at a chain's
    start (``pred[i] < 0``), else its predecessor's (``out[pred[i]]``; predecessors come
    earlier, so ranges taken in order see them filled)."""
    for i in range(len(pred)):
        p = pred[i]
        out[lo + i] = start_value[i] if p < 0 else out[p]


@numba.njit(cache=True, nogil=True)
def head_links(holds, group, lo, last, prev):  # pragma: no cover
    """For requests ``lo + i`` in time order: ``prev[i]``, the last earlier request of the same
    head group that holds the head (-1 if none, or if this one does not hold it); ``last``
    carries each group's last holder from range to range."""
    for i in range(len(holds)):
        if holds[i]:
            g = group[i]
            prev[i] = last[g]
            last[g] = lo + i
        else:
            prev[i] = -1
