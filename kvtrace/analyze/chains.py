"""Prefix chains: a replayable block trace derived from token counts.

Telemetry gives counts, not prompt contents. Within a thread an agent's conversation mostly
grows, so request *i*'s prompt (``read + write + input`` tokens) starts with the prefix that
an earlier request left in the cache (its ``read + write``). Requests linked that way form a
*chain*, each request sharing a number of tokens with the one it continues. The provider's
cache read is the evidence, in this order:

1. a request continues a recent request of its session (any thread, same model) whose cached
   prefix equals its read exactly, and shares all of it: parallel subagents that telemetry
   reports under one thread id are told apart so, and a subagent that extends the main
   thread's prompt (or the reverse) is followed across thread ids;
2. else its thread's previous request (or, if another thread's request continued that one,
   the end of that chain): if that request's cache was still alive (``cache_ttl_s``) and the
   read is shorter than what it cached, only the read is shared (the history was rewritten
   deep down, or rewound to a shorter prompt);
3. else the live request of the session that cached the least beyond the read, sharing the read;
4. else that previous request's whole cached prefix, if the prompt holds it and no read says
   otherwise (its cache had expired, or the read reached beyond it): append-only.

A chain ends when none of these applies, when the previous request was a compaction
(``query_source`` compact) or this one carries a compaction marker, when the model changes
(the provider's cache is per model), or when the request gains or loses the shared head
(below). A rewrite made while the cache had expired leaves no trace in the counts, so it is
taken for an append: that is the derivation's main remaining error (``docs/prefix-chains.md``).

Chains are kept per thread, model and *lane*: auxiliary requests (titles, quota checks) run in
a lane of their own, so they neither end nor extend the conversation's chain; a compaction
request stays in the conversation (it reads the conversation's prefix).

A *head* (system prompt and tools) is identical for all sessions of an organization and model
(main threads and subagents apart): the most common non-zero cache read at the start of a
chain, when enough chains agree. Requests whose prompt holds the head share its block ids
across sessions, so a new session can hit a head another session keeps warm.

Blocks are ``block_size`` tokens; block *k* of a request is named by the request that first
wrote it, so equal ids mean an equal prefix, as in a Mooncake trace. Only whole blocks are
shared: a request loses less than one block of its hit to the rounding.

Every assumption is a field of :class:`ChainParams`. The derivation is vectorized (Polars and
numpy) and yields the access runs directly (``kvtrace.analyze.access``), so reuse analytics on
10 M requests never build the blocks; the block ids themselves are written by one compiled pass
only when asked for (export, replay).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa

from kvtrace.analyze.access import AccessRuns, compact_dtype, compact_ints, tokens_of_runs
from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze import spill
from kvtrace.errors import ConfigError


def _p(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class ChainParams:
    """Assumptions of the chain derivation (each one an option of ``kvtrace reuse``/``export``)."""

    block_size: int = _p(
        64,
        "Tokens per block of a derived trace. 64 is the block of public Claude Code "
        "block traces; each request loses under one block of hit to rounding.",
    )
    head_tokens: int | None = _p(
        None,
        "Shared head (system prompt + tools) in tokens for every org and model; "
        "None detects it per org, model and thread kind; 0 disables it.",
    )
    head_min_chains: int = _p(2, "Detect a head only when at least this many chains start by reading it.")
    head_per_thread_kind: bool = _p(True, "Main threads and subagents have different heads (system prompts).")
    chain_per_model: bool = _p(
        True,
        "Keep one chain per model within a thread: a model change starts a new "
        "chain, and another model's requests in between (auxiliary calls) do not "
        "end it. False: any model change ends the chain for good.",
    )
    auxiliary_own_chain: bool = _p(
        True,
        "Requests whose query source is auxiliary (titles, summaries, quota checks; "
        "not compaction) form chains of their own, so they neither end nor extend "
        "the conversation's chain.",
    )
    compaction_ends_chain: bool = _p(True, "A compaction request (or a compaction marker) ends the chain.")
    link_window: int = _p(
        16,
        "A request continues the most recent of its session's last this-many requests "
        "of its model (any thread) whose cached prefix equals its cache read (parallel "
        "subagents reported under one thread id interleave; a subagent may continue the "
        "main thread's prompt), else its thread's previous request. 1: only the session's "
        "previous request is matched by its read.",
    )
    cache_ttl_s: int = _p(
        300,
        "The provider's cache TTL behind the reads (3600 for a request that wrote 1 h "
        "cache). A request within it of its thread's previous request that reads less "
        "than that one cached shares only what it read (the history was rewritten, or "
        "rewound: a shorter prompt still shares its read); beyond it the whole cached "
        "prefix is assumed if the prompt holds it. 0: a read never limits a link.",
    )
    max_blocks: int = _p(
        1_500_000_000, "Refuse to write more block ids than this (8 bytes each); raise block_size or narrow the window."
    )

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in fields(cls)}

    @classmethod
    def from_settings(cls, settings: list[str] | None = None, **given) -> "ChainParams":
        """Build from ``name=value`` texts (the CLI's ``--chain``) over keyword values."""
        kinds = {f.name: f.type for f in fields(cls)}
        for item in settings or []:
            name, sep, raw = item.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in kinds:
                raise ConfigError(
                    f"--chain '{item}' is not NAME=VALUE of a chain parameter", hint="names: " + ", ".join(kinds)
                )
            raw = raw.strip()
            kind = str(kinds[name])
            try:
                if "bool" in kind:
                    if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(raw)
                    value = raw.lower() in ("true", "1", "yes")
                elif raw.lower() in ("none", "") and "None" in kind:
                    value = None
                else:
                    value = int(raw)
            except ValueError:
                raise ConfigError(f"--chain {name}: '{raw}' is not a valid {kind}") from None
            given[name] = value
        return cls(**given)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ConfigError(f"block size {self.block_size} must be a positive number of tokens")
        if self.head_tokens is not None and self.head_tokens < 0:
            raise ConfigError("head tokens must be >= 0", hint="0 disables the shared head")


def _codes(df, cols: list[str], labels: bool = False, sep: str = "/"):
    """Dense integer codes of the value combinations of ``cols``, numbered in order of first
    appearance; with ``labels`` also each combination as text (``a/b/c``, or joined by ``sep``),
    indexed by code.

    Combinations are told apart by a 64-bit hash (4x faster than ranking joined strings at
    10 M rows; two of 10 M distinct keys collide with odds of about 1 in 300,000).
    """
    import polars as pl

    from kvtrace.analyze._kernels import first_seen_codes

    h = df.select(pl.struct([pl.col(c).cast(pl.Utf8).fill_null("") for c in cols]).hash(seed=0)).to_series()
    codes, row = first_seen_codes(h.to_numpy())
    if not labels:
        return codes
    names = (
        df[row]
        .select(pl.concat_str([pl.col(c).cast(pl.Utf8).fill_null("") for c in cols], separator=sep))
        .to_series()
        .to_list()
    )
    return codes, names


def _with(df, **cols):
    import polars as pl

    return df.with_columns([pl.Series(k, v) for k, v in cols.items()])


def _prev_in_group(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by (group, row) and each row's predecessor in its group (-1 if first), for
    dense group codes ``0..k-1``."""
    from kvtrace.analyze._kernels import group_order

    if len(code) and int(code.min()) < 0:
        raise ValueError("group codes must be dense and non-negative")
    return group_order(code, int(code.max()) + 1 if len(code) else 0)


def _detect_heads(pairs: list, n_groups: int, p: ChainParams) -> np.ndarray:
    """Head tokens per head group: the most common non-zero read at chain starts, from
    ``(pairs, counts)`` of ``(group, read)`` at chain starts (``np.unique`` of ranges of them)."""
    heads = np.zeros(n_groups, dtype=np.int64)
    if p.head_tokens is not None:
        heads[:] = p.head_tokens
        return heads
    pairs, counts = _merged_pairs(pairs)
    if not counts.size:
        return heads
    # Per group the pair with the most chains (the smaller read on a tie).
    order = np.lexsort((pairs[1], -counts, pairs[0]))
    pairs, counts = pairs[:, order], counts[order]
    first = np.append(True, pairs[0, 1:] != pairs[0, :-1])
    ok = first & (counts >= p.head_min_chains)
    heads[pairs[0, ok]] = pairs[1, ok]
    return heads


def _merged_pairs(pairs: list) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs, counts)`` from ``np.unique`` of several pieces, as one."""
    pairs = [(g, c) for g, c in pairs if c.size]
    if not pairs:
        return np.zeros((2, 0), np.int64), np.zeros(0, np.int64)
    got, inv = np.unique(np.concatenate([g for g, _ in pairs], axis=1), axis=1, return_inverse=True)
    return got, np.bincount(inv.ravel(), weights=np.concatenate([c for _, c in pairs])).astype(np.int64)


def derive_chains(
    frame, params: ChainParams | None = None, materialize: bool = True, range_rows: int = spill.RANGE_ROWS
) -> BlockTrace:
    """A block trace from per-request token counts.

    Args:
        frame: Polars frame with the columns of ``queries/chain_requests.sql`` (``tie`` aside),
            with a ``gidx`` (rows taken in that order; ``kvtrace.analyze.load.chain_partitions``
            gives it) or with a ``request_key`` instead (rows taken in time order, then request
            key: a frame in any other order is sorted so).
        params: the assumptions (see :class:`ChainParams`).
        materialize: write the block ids (needed by export and replay). Without them the trace
            still answers every reuse, TTL and working-set question, from its access runs.
        range_rows: requests per range of the steps over all requests (the result does not
            depend on it).

    Returns:
        A :class:`BlockTrace` (name ``derived``); see :func:`derive_partitioned`.
    """
    if "gidx" in frame.columns:  # the warehouse's rows (or some of them), in time order
        frame = frame.sort("gidx").drop("gidx").with_row_index("gidx")
    else:
        if frame.height > 1 and not _in_order(frame):
            frame = frame.sort(["ts_us", "request_key"], maintain_order=True)
        frame = frame.with_row_index("gidx")
    return derive_partitioned([frame], frame.height, params, materialize, range_rows=range_rows)


# Requests per partition of the chain derivation: each partition's text columns and scratch
# arrays take about 1 KB a request, so this bounds them near 64 MB; the linking's hash tables
# stay in cache.
PARTITION_ROWS = 64_000
# Per-request numbers the derivation and the analyses after it read; strings stay in a partition.
_NUMBERS = (
    "ts_us",
    "read_tokens",
    "write_tokens",
    "write_5m_tokens",
    "write_1h_tokens",
    "input_tokens",
    "output_tokens",
)
# What link_partition reads of each row (those of queries/chain_requests.sql, gidx for tie).
LINK_COLUMNS = (
    "gidx",
    *_NUMBERS,
    "org_id",
    "session_id",
    "thread_id",
    "model",
    "query_source",
    "is_compact_request",
    "after_compaction",
)


def derive_partitioned(
    parts,
    n: int,
    params: ChainParams | None = None,
    materialize: bool = True,
    times: np.ndarray | None = None,
    range_rows: int = spill.RANGE_ROWS,
) -> BlockTrace:
    """A block trace from per-request token counts that arrive in partitions of whole sessions.

    Chains never cross a session, so each partition is linked on its own (:func:`link_partition`)
    and only numbers are kept from it; what spans sessions (the shared heads, the head blocks'
    previous and next holders) is found on the whole afterwards (:func:`derive_linked`). Any
    split of the sessions gives the same trace.

    Args:
        parts: Polars frames with the columns of ``queries/chain_requests.sql``, with ``gidx``
            in place of ``tie``: each row's position in the time order (then request key) of all
            rows, ``0..n-1``. Every session lies in one frame.
        n: the number of rows of all frames.
        params: the assumptions (see :class:`ChainParams`).
        materialize: write the block ids (see :func:`derive_chains`).
        times: every row's ``ts_us`` in time order, when the reader has them: the trace keeps
            this array rather than assembling its own (see :func:`derive_linked`).

    Returns:
        A :class:`BlockTrace` (name ``derived``) whose ``meta`` also holds the per-request
        ``columns`` (the token counts of ``queries/chain_requests.sql`` and ``model``, a code
        into ``model_names``), ``chain`` ids, ``thread`` codes (into ``thread_names``, an Arrow
        string array),
        ``cached`` (read + write), ``head`` tokens, ``chain_prev`` (the request a chain
        continues from, -1 at a start) and ``shared`` (the tokens it shares with that request).
    """
    p = params or ChainParams()
    linked = (link_partition(part, p) for part in parts if part.height)
    return derive_linked(linked, n, p, materialize, times, range_rows)


class PartitionError(ValueError):
    """Partitions that do not hold each of the ``n`` rows exactly once."""


@dataclass
class Linked:
    """One partition of whole sessions reduced to numbers by :func:`link_partition`.

    ``numbers`` holds one array per request (sorted by ``gidx``): the token counts of
    ``queries/chain_requests.sql``, ``gidx``, ``pred`` (the ``gidx`` of the request its chain
    continues, -1 at a start), ``depth`` (tokens shared with it), ``compact_req``,
    ``compaction``, ``model`` and ``hgroup`` (codes into ``model_labels`` and
    ``hgroup_labels``), and ``thread`` and ``session`` (each named by its first row's ``gidx``).
    ``thread_names`` maps a thread's first ``gidx`` to its label. Nothing in it depends on the
    other partitions, so a partition can be linked anywhere (a Spark task) and sent as Arrow.
    """

    numbers: dict[str, np.ndarray]
    model_labels: list[str]
    hgroup_labels: list[str]
    thread_names: dict[int, str]


def derive_linked(
    linked,
    n: int,
    params: ChainParams | None = None,
    materialize: bool = True,
    times: np.ndarray | None = None,
    range_rows: int = spill.RANGE_ROWS,
) -> BlockTrace:
    """A block trace from linked partitions (:class:`Linked`, in any order) of ``n`` requests:
    the steps of :func:`derive_partitioned` after linking. With ``times`` (every row's
    ``ts_us`` in time order, as a warehouse reader knows them before the first partition) the
    trace keeps that array, and each partition's times are checked against it.

    Each partition's numbers go to disk at their places as they arrive (``kvtrace.analyze.spill``),
    and the steps over all requests take them a range at a time: memory holds the times and a
    range, not every request's numbers."""
    p = params or ChainParams()
    models, hgroups = _Labels(), _Labels()
    thread_keys, thread_labels = [], []  # each partition's threads: first rows and labels
    if times is not None and len(times) != n:
        raise PartitionError(f"{len(times)} times given for {n} rows")
    ts_us = times if times is not None else np.zeros(n, dtype=np.int64)
    cols: dict[str, np.ndarray] = {}
    filled = np.zeros(n, dtype=bool)
    sessions = []  # each partition's sessions (named by their first row)
    for part in linked:
        got = dict(part.numbers)
        at = got.pop("gidx")
        if not len(at):
            continue
        if at[0] < 0 or at[-1] >= n or filled[at].any() or (np.diff(at) <= 0).any():
            raise PartitionError(f"the partitions hold a row twice, or one outside 0..{n - 1}")
        t = got.pop("ts_us")
        if times is None:
            ts_us[at] = t
        elif not np.array_equal(times[at], t):
            raise PartitionError("the partitions' times are not the times given for their places")
        filled[at] = True
        got["model"] = models.codes(part.model_labels)[got["model"]]
        got["hgroup"] = hgroups.codes(part.hgroup_labels)[got["hgroup"]]
        thread_keys.append(np.fromiter(part.thread_names.keys(), dtype=np.int64, count=len(part.thread_names)))
        thread_labels.append(pa.array(list(part.thread_names.values()), pa.large_string()))
        sessions.append(np.unique(got["session"]))
        for k, v in got.items():
            v = compact_ints(v)
            if k not in cols:
                cols[k] = spill.empty(n, v.dtype)
            elif not np.can_cast(v.dtype, cols[k].dtype):
                cols[k] = spill.widened(cols[k], v.dtype)  # a partition's numbers outgrew 32 bits
            cols[k][at] = v
        spill.release(*cols.values())
    if not filled.all():
        raise PartitionError(f"the partitions hold {int(filled.sum())} rows, not {n}")
    del filled
    if not n:
        for k in (*_NUMBERS[1:], "pred", "depth", "model", "hgroup", "thread", "session"):
            cols[k] = spill.empty(0, np.int64)
        cols["compact_req"] = cols["compaction"] = spill.empty(0, bool)
    model_remap, model_names = models.canonical()
    hgroup_remap, _ = hgroups.canonical()
    # Sessions and threads numbered in the order they first appear: by their first row.
    session_firsts = np.unique(np.concatenate(sessions)) if sessions else np.zeros(0, np.int64)
    # Thread labels as one Arrow array (a fleet has millions of threads), in thread code order.
    keys = np.concatenate(thread_keys) if thread_keys else np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")
    labels = pa.concat_arrays(thread_labels).take(order) if thread_labels else pa.array([], pa.large_string())
    codes = {"model": model_remap, "hgroup": hgroup_remap, "session": session_firsts, "thread": keys[order]}
    return _finish(ts_us, cols, codes, labels, model_names, p, materialize, range_rows)


class _Labels:
    """Codes of labels that span partitions (models, head groups): numbered as first seen, then
    renumbered in label order by :meth:`canonical`, so no code depends on how rows were split."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def codes(self, labels: list[str]) -> np.ndarray:
        return np.array([self.index.setdefault(s, len(self.index)) for s in labels], dtype=np.int64)

    def canonical(self) -> tuple[np.ndarray, list[str]]:
        """``(new code of each old code, labels in new code order)``."""
        labels = sorted(self.index)
        remap = np.empty(len(labels), dtype=np.int64)
        remap[[self.index[s] for s in labels]] = np.arange(len(labels))
        return remap, labels


def _firsts(code: np.ndarray, gidx: np.ndarray) -> np.ndarray:
    """Per group code, the global position of its first row."""
    first = np.full(int(code.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, code, gidx)
    return first


def link_partition(frame, p: ChainParams) -> Linked:
    """One partition of whole sessions (a Polars frame with the columns of
    ``queries/chain_requests.sql``, ``gidx`` for ``tie``, in any row order) reduced to numbers: its chain links, found
    session by session (see ``_kernels.link_chains``), and what the rest of the derivation
    reads."""
    from kvtrace.analyze._kernels import first_seen_codes, link_chains

    frame = frame.sort("gidx")
    n = frame.height
    gidx = frame.get_column("gidx").to_numpy().astype(np.int64)
    out = {c: frame.get_column(c).to_numpy().astype(np.int64) for c in _NUMBERS}
    out["gidx"] = gidx
    read, cached = out["read_tokens"], out["read_tokens"] + out["write_tokens"]
    prompt = cached + out["input_tokens"]
    compact_req = frame.get_column("is_compact_request").to_numpy().astype(bool)
    marker = frame.get_column("after_compaction").to_numpy().astype(bool)

    thread_cols = ["org_id", "session_id", "thread_id"]
    thread, thread_labels = _codes(frame, thread_cols, labels=True)
    session = _codes(frame, ["org_id", "session_id"])
    lane = np.zeros(n, dtype=np.int64)
    if p.auxiliary_own_chain:
        aux = (frame.get_column("query_source").fill_null("") == "auxiliary").to_numpy()
        lane = (aux & ~compact_req).astype(np.int64)
    model, model_labels = _codes(frame, ["model"], labels=True)
    # A chain's key: its thread and lane (and model), from the codes already found.
    key = thread * 2 + lane
    if p.chain_per_model:
        key = key * (int(model.max()) + 1) + model
    key = first_seen_codes(key)[0]

    # Chain predecessors: one compiled pass per session.
    order, _ = _prev_in_group(session)
    stop_after = compact_req if p.compaction_ends_chain else np.zeros(n, bool)
    force = marker if p.compaction_ends_chain else np.zeros(n, bool)
    read_ttl = np.where(out["write_1h_tokens"] > 0, 3600_000_000, p.cache_ttl_s * 1_000_000).astype(np.int64)
    pred = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    link_chains(
        order,
        session,
        key,
        int(key.max()) + 1,
        model,
        read,
        cached,
        prompt,
        out["ts_us"],
        read_ttl,
        stop_after,
        force,
        max(1, p.link_window),
        pred,
        depth,
    )
    out["pred"] = np.where(pred >= 0, gidx[np.maximum(pred, 0)], -1)
    out["depth"] = depth
    out["compact_req"], out["compaction"] = compact_req, compact_req | marker
    out["model"] = model
    # Head groups: per (org, model[, thread kind]); a head is shared across sessions.
    kind = (frame.get_column("thread_id").fill_null("main") != "main").cast(int).to_numpy()
    hcols = ["org_id", "model"] + (["_kind"] if p.head_per_thread_kind else [])
    out["hgroup"], hlabels = _codes(_with(frame, _kind=kind), hcols, labels=True, sep="\x1f")
    first = _firsts(thread, gidx)
    out["thread"] = first[thread]
    out["session"] = _firsts(session, gidx)[session]
    return Linked(out, model_labels, hlabels, dict(zip(first.tolist(), thread_labels)))


def _finish(ts_us, w: dict, codes: dict, thread_names, model_names, p: ChainParams, materialize: bool, range_rows: int):
    """The derivation's steps over all requests (numbers only, in time order): shared heads,
    chains, head links, and what makes the access runs a chunk at a time.

    ``w`` holds the linked numbers of every request (spilled), ``codes`` what renumbers their
    codes (``model``, ``hgroup``: new code per old; ``session``, ``thread``: the sorted first
    rows that name them). Every step runs a range of requests at a time, in time order; what it
    looks up in other ranges (a chain's start or predecessor, a head group's last holder) is
    on disk too, or a value per group (``along_chains`` relies on a predecessor coming earlier in
    time order, as linking makes it). Token counts are kept as 32-bit integers until a value
    needs more (``spill.put`` widens the column); request indexes (``chain``, ``chain_next``,
    ``head_next``) as 32 bits below 2**31 requests."""
    from kvtrace.analyze._kernels import along_chains, head_links

    B = p.block_size
    n = len(ts_us)
    ix = np.int32 if n < 2**31 else np.int64
    get = lambda name, lo, hi: spill.read(w[name], lo, hi)  # noqa: E731
    i32, c = np.int32, compact_dtype  # narrow types are widened where values outgrow them (spill.put)
    kinds = {
        **{k: c(codes[k]) for k in ("model", "hgroup", "session", "thread")},
        **dict(cached=i32, prompt=np.int64, chain_prev=w["pred"].dtype, shared=i32, h=i32, head=i32),
        **dict(inherit=i32, head_prev=ix, by_next=i32, ts=np.float64, output_tokens=np.int64),
    }
    out = {k: spill.empty(n, dtype) for k, dtype in kinds.items()}

    def put(name, lo, values):
        out[name] = spill.put(out[name], lo, values)

    # Each request alone: codes in label order, what it caches, its prompt; the chain starts'
    # reads, for the heads.
    pairs = []
    for lo, hi in spill.ranges(n, range_rows):
        put("model", lo, codes["model"][get("model", lo, hi)])
        group = codes["hgroup"][get("hgroup", lo, hi)]
        put("hgroup", lo, group)
        r = get("read_tokens", lo, hi).astype(np.int64)
        cached = r + get("write_tokens", lo, hi)
        put("cached", lo, cached)
        put("prompt", lo, cached + get("input_tokens", lo, hi))
        sel = (get("pred", lo, hi) < 0) & (r > 0)
        pairs.append(np.unique(np.stack((group[sel], r[sel])), axis=1, return_counts=True))
        if len(pairs) >= 16:  # merged as they come: as many as distinct (group, read) pairs
            pairs = [_merged_pairs(pairs)]
    heads = _detect_heads(pairs, len(codes["hgroup"]), p)
    Hc = compact_ints(heads)

    # Whether each request holds its group's head: it does unless its chain began reading less.
    first_read = spill.empty(n, w["read_tokens"].dtype)
    holds = spill.empty(n, bool)
    for lo, hi in spill.ranges(n, range_rows):
        along_chains(get("pred", lo, hi), lo, get("read_tokens", lo, hi), first_read)
        fr = spill.read(first_read, lo, hi)
        spill.release(first_read)
        H = Hc[spill.read(out["hgroup"], lo, hi)]
        prompt = spill.read(out["prompt"], lo, hi)
        spill.put(holds, lo, (H >= B) & ((fr == 0) | (fr >= H)) & (prompt >= H))
    del first_read

    # A chain also ends where the head comes or goes; chains are numbered by their start (a
    # chain's start is its first request in time order). Head links: the previous request of
    # the same head group that holds the head.
    chain, chain_next, head_next = spill.empty(n, ix), spill.filled(n, ix, -1), spill.filled(n, ix, -1)
    offsets = spill.empty(n + 1, np.int64)
    last_holder = np.full(len(heads), -1, dtype=np.int64)
    chains = 0
    for lo, hi in spill.ranges(n, range_rows):
        pred = get("pred", lo, hi)
        hh = spill.read(holds, lo, hi)
        cut = (pred >= 0) & (hh != holds[np.maximum(pred, 0)])
        spill.release(holds)
        pred = np.where(cut, -1, pred)
        put("chain_prev", lo, pred)
        depth = np.where(pred >= 0, get("depth", lo, hi), 0)
        put("shared", lo, depth)
        starts = pred < 0
        along_chains(pred, lo, chains + np.cumsum(starts) - 1, chain)
        spill.release(chain)
        chains += int(starts.sum())
        H = Hc[spill.read(out["hgroup"], lo, hi)]
        h = np.where(hh, H // B, 0)
        put("h", lo, h)
        put("head", lo, np.where(hh, H, 0))
        put("inherit", lo, np.where(pred >= 0, np.maximum(h, depth // B), h))
        has = pred >= 0
        chain_next[pred[has]] = lo + np.flatnonzero(has)
        spill.release(chain_next)
        blocks = -(-spill.read(out["prompt"], lo, hi) // B)
        spill.put(offsets, lo + 1, offsets[lo] + np.cumsum(blocks))
        hprev = np.empty(hi - lo, dtype=ix)
        head_links(hh, spill.read(out["hgroup"], lo, hi), lo, last_holder, hprev)
        put("head_prev", lo, hprev)
        has = hprev >= 0
        head_next[hprev[has]] = lo + np.flatnonzero(has)
        spill.release(head_next)
    del holds

    # What the next request of a chain takes; times in seconds; sessions and threads numbered.
    for lo, hi in spill.ranges(n, range_rows):
        nxt = spill.read(chain_next, lo, hi)
        h = spill.read(out["h"], lo, hi)
        put("by_next", lo, np.where(nxt >= 0, np.maximum(h, out["inherit"][np.maximum(nxt, 0)]), h))
        spill.release(out["inherit"])
        put("ts", lo, ts_us[lo:hi] / 1e6)
        for name in ("session", "thread"):
            put(name, lo, np.searchsorted(codes[name], get(name, lo, hi)))
        put("output_tokens", lo, get("output_tokens", lo, hi))

    o = {k: spill.frozen(v) for k, v in out.items()}
    trace = BlockTrace(
        o["ts"],
        o["prompt"],
        o["output_tokens"],
        spill.frozen(offsets),
        np.zeros(0, np.int64),
        B,
        session=o["session"],
        name="derived",
    )
    columns = {"ts_us": ts_us}
    columns.update({k: spill.frozen(w[k]) for k in _NUMBERS[1:-1]})
    columns.update(output_tokens=o["output_tokens"], model=o["model"])
    trace.meta.update(
        {
            "_ts_us": ts_us,
            "columns": columns,
            "model_names": model_names,
            "chain": spill.frozen(chain),
            "thread": o["thread"],
            "thread_names": thread_names,
            "cached": o["cached"],
            "head": o["head"],
            "chain_prev": o["chain_prev"],
            "shared": o["shared"],
            "head_prev": o["head_prev"],
            "compaction": spill.frozen(w["compaction"]),
            "compact_request": spill.frozen(w["compact_req"]),
            "params": p,
            "materialized": False,
        }
    )
    trace.meta["_run_source"] = _ChainRuns(
        trace,
        o["h"],
        o["inherit"],
        o["by_next"],
        o["chain_prev"],
        spill.frozen(chain_next),
        o["head_prev"],
        spill.frozen(head_next),
    )
    trace.meta["_ids_plan"] = (o["h"], o["inherit"], o["hgroup"], heads)
    if materialize:
        materialize_ids(trace)
    return trace


def _in_order(frame) -> bool:
    """Whether the rows are sorted by time, then request key."""
    import polars as pl

    step = pl.col("ts_us").diff()
    later_key = pl.col("request_key") > pl.col("request_key").shift()
    return bool(frame.select(((step > 0) | ((step == 0) & later_key)).slice(1).all()).item())


class _ChainRuns:
    """The access runs of a derived trace, made on demand for a range of requests from its chain
    structure, so the runs of all requests are never held at once. At most four runs a request:
    head; then the blocks split by what the previous request of the chain left (``inherit``) and
    by what the next one takes (``by_next``)."""

    def __init__(self, trace, h, inherit, by_next, chain_prev, chain_next, hprev, hnext) -> None:
        # the trace's arrays, not the trace: it holds this object, and a cycle would keep it alive
        self.offsets, self.input_length, self.block_size = trace.offsets, trace.input_length, trace.block_size
        self.arrays = (h, inherit, by_next, chain_prev, chain_next, hprev, hnext)

    def __call__(self, lo: int, hi: int) -> AccessRuns:
        """The runs of requests ``[lo, hi)``."""
        from kvtrace.analyze._kernels import chain_runs

        n_blocks = np.diff(spill.read(self.offsets, lo, hi + 1))
        req, first, blocks, prev, nxt = chain_runs(*(spill.read(a, lo, hi) for a in self.arrays), n_blocks)
        tokens = tokens_of_runs(spill.read(self.input_length, lo, hi), self.block_size, req, first, blocks)
        req += lo
        return AccessRuns(
            req=req,
            first=first,
            blocks=blocks,
            tokens=tokens,
            prev=prev,
            next=nxt,
            dup=np.zeros(len(req), dtype=bool),
        )


def materialize_ids(trace: BlockTrace) -> BlockTrace:
    """Write the block ids of a derived trace (in place); a no-op if they are there."""
    if trace.meta.get("materialized", True):
        return trace
    p: ChainParams = trace.meta["params"]
    if trace.n_blocks > p.max_blocks:
        raise ConfigError(
            f"the derived trace would have {trace.n_blocks:,} blocks of {p.block_size} tokens (limit {p.max_blocks:,})",
            hint="pass a larger --block-size or a narrower --since/--until",
        )
    from kvtrace.analyze._kernels import chain_ids

    h, inherit, hgroup, heads = trace.meta["_ids_plan"]
    B = trace.block_size
    base = np.zeros(len(heads) + 1, dtype=np.int64)
    np.cumsum(heads // B, out=base[1:])
    head_base = base[hgroup] if len(hgroup) else np.zeros(0, np.int64)
    order, _ = _prev_in_group(trace.meta["chain"])
    out = np.empty(trace.n_blocks, dtype=np.int64)
    chain_ids(order, trace.offsets, trace.meta["chain_prev"], h, head_base, inherit, out)
    trace.hash_ids = out
    trace.meta["materialized"] = True
    return trace


def chain_reads(trace: BlockTrace, ttl_s: float | None, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Cache-read tokens per request ``lo..hi`` (default: all) of a derived trace under an idle
    TTL, token-exact.

    A hosted prompt cache reads a request's whole cached prefix from the previous request of
    its chain if that one started no more than ``ttl_s`` before; else the shared head if a
    request holding it did; else nothing. Reads never exceed what the request caches
    (``read + write``), so an uncacheable request stays uncached.
    """
    from kvtrace.analyze.access import seconds_to_us, ts_us

    m = trace.meta
    if "chain_prev" not in m:
        raise ConfigError(
            "token-exact cache reads need a trace derived from telemetry",
            hint="block-hash traces carry no cache breakpoints; use the block what-if",
        )
    from kvtrace.analyze._kernels import chain_read_tokens

    hi = trace.n_requests if hi is None else hi
    out = np.empty(hi - lo, dtype=np.int64)
    cols = (spill.read(m[k], lo, hi) for k in ("cached", "head", "chain_prev", "head_prev", "shared"))
    chain_read_tokens(ts_us(trace), lo, seconds_to_us(ttl_s), *cols, out)
    return out
