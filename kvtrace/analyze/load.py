"""Block traces from the warehouse or from a file.

``load_block_trace`` reads the ingested block-hash traces (``block_requests``) when there are
any, else derives prefix chains from the telemetry (``request_usage``): either way the result
is one :class:`BlockTrace`, so reuse analytics and replay treat both alike.
"""

from __future__ import annotations

from contextlib import closing
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.chains import PARTITION_ROWS, ChainParams, derive_partitioned
from kvtrace.errors import BadTraceInput, ConfigError
from kvtrace.ingest import block_hash
from kvtrace.ingest.formats import sniff
from kvtrace.window import parse_instant


def block_trace_from_table(t: pa.Table, name: str = "trace", block_size: int | None = None) -> BlockTrace:
    """A ``BlockTrace`` from rows shaped like ``block_requests`` (or the ``block_trace`` query).

    Rows must be in time order. Several traces in one table are kept apart: each trace's block
    ids are shifted past the previous trace's, so equal ids of different traces never meet.
    Bailian chats are grouped into sessions by following ``parent_chat_id`` to the root.
    """
    n = t.num_rows
    if "ts_us" in t.column_names:
        ts = t.column("ts_us").to_numpy().astype(np.float64) / 1e6
    else:
        ts = t.column("ts").cast(pa.int64()).to_numpy().astype(np.float64) / 1e6
    sizes = np.unique(t.column("block_size").to_numpy()) if n and "block_size" in t.column_names else []
    if len(sizes) > 1:
        raise ConfigError(
            f"the traces mix block sizes {', '.join(map(str, sizes))}",
            hint="analyse one trace at a time with --trace NAME",
        )
    bs = int(block_size or (sizes[0] if len(sizes) else block_hash.MOONCAKE_BLOCK_SIZE))
    hl = t.column("hash_ids").combine_chunks() if n else pa.array([], pa.list_(pa.int64()))
    offsets = hl.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    ids = hl.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    session = None
    traces = t.column("trace").to_numpy(zero_copy_only=False) if "trace" in t.column_names else None
    if traces is not None and n and len(set(traces)) > 1:
        ids = _separate_traces(traces, offsets, ids)
    if "chat_id" in t.column_names and n and t.column("chat_id").null_count < n:
        session = _bailian_sessions(t, traces)
    trace = BlockTrace(
        ts,
        t.column("input_length").to_numpy(),
        t.column("output_length").to_numpy(),
        offsets,
        ids,
        bs,
        session=session,
        name=name,
    )
    return trace


def _separate_traces(traces: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    names, code = np.unique(traces, return_inverse=True)
    per_block = np.repeat(code, np.diff(offsets))
    shift = np.zeros(len(names), dtype=np.int64)
    lo = ids.min() if ids.size else 0
    base = 0
    for c in range(len(names)):
        sel = per_block == c
        if sel.any():
            shift[c] = base - lo
            base += int(ids[sel].max()) - lo + 1
    return ids + shift[per_block]


def _bailian_sessions(t: pa.Table, traces) -> np.ndarray:
    """Root chat of each request (a chat whose parent is -1, missing or unknown is a root)."""
    import polars as pl

    tr = pl.Series("t", traces if traces is not None else np.zeros(t.num_rows, dtype=object), dtype=pl.Utf8)
    df = pl.DataFrame(
        {
            "t": tr,
            "chat": pl.Series(t.column("chat_id").combine_chunks()),
            "parent": pl.Series(t.column("parent_chat_id").combine_chunks()),
        }
    )
    df = df.with_columns(
        c=pl.concat_str("t", "chat", separator="\x00", ignore_nulls=True),
        p=pl.concat_str("t", "parent", separator="\x00", ignore_nulls=True),
    )
    chats = df.select(pl.col("c").unique(maintain_order=True)).with_row_index("ci")
    code = df.join(chats, on="c", how="left", maintain_order="left").get_column("ci").to_numpy()
    parent = (
        df.join(chats.rename({"c": "p", "ci": "pi"}), on="p", how="left", maintain_order="left")
        .get_column("pi")
        .to_numpy()
    )
    up = np.arange(chats.height)
    has = ~np.isnan(parent.astype(np.float64))
    up[code[has]] = parent[has].astype(np.int64)  # chat -> its parent chat (itself for roots)
    for _ in range(64):  # pointer jumping: depth halves every round
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        up = nxt
    return up[code].astype(np.int64)


def read_block_trace(path: str | Path, format: str | None = None, block_size: int | None = None) -> BlockTrace:
    """A Mooncake or Bailian file straight into a ``BlockTrace`` (no warehouse), read by the
    block-trace reader that ``kvtrace ingest`` uses (``kvtrace.ingest.block_hash``).

    Args:
        path: the file (``.gz`` allowed).
        format: ``mooncake`` or ``bailian`` (default: detected).
        block_size: tokens per block of a file that does not say (see ``block_hash``); when it
            was assumed, ``meta["block_size_assumed"]`` says so (replay and reuse report it).

    Raises:
        BadTraceInput: a line the reader rejects (the first one, by file, line and field), or a
            block size in conflict.
    """
    path = Path(path)
    if format is None:
        format = sniff(path)
    if format not in block_hash.PARSERS:
        raise ConfigError(f"{path} is {format}, not a block-hash trace", hint="ingest it and run on the warehouse")
    parsed = block_hash.PARSERS[format](path, block_size=block_size)
    if parsed.rejects:
        r = parsed.rejects[0]
        raise BadTraceInput(
            r.path or path,
            r.line,
            r.reason,
            field=r.field,
            hint="fix or remove the line, or ingest the file: ingest skips bad lines and counts them",
        )
    t = parsed.block_requests
    order = np.argsort(t.column("ts").cast(pa.int64()).to_numpy(), kind="stable")
    trace = block_trace_from_table(t.take(order), name=block_hash.trace_name(path))
    if parsed.warnings:
        trace.meta["block_size_assumed"] = parsed.warnings[0]
    return trace


def load_block_trace(
    store,
    trace: str | None = None,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    params=None,
    materialize: bool = True,
    partition_rows: int = PARTITION_ROWS,
) -> BlockTrace:
    """The warehouse's requests as one block trace.

    Args:
        store: the warehouse.
        trace: one block-hash trace by name (default: all of them, kept apart).
        since, until: window (UTC; ``datetime`` or ISO text), inclusive / exclusive.
        params: :class:`kvtrace.analyze.chains.ChainParams` for derived chains.
        materialize: write the block ids of derived chains. Reuse, TTL and working-set analyses
            do not need them (they read the chains' access runs), export and replay do.
        partition_rows: requests per partition of whole sessions read at a time for derived
            chains (the result does not depend on it).

    Returns:
        The ingested block-hash traces if the warehouse has any, else prefix chains derived from
        the telemetry (see ``kvtrace.analyze.chains``). An empty warehouse gives an empty trace.
    """
    has_blocks = store.scalar("SELECT count(*) FROM block_requests") > 0
    since, until = _instant(store, since, has_blocks), _instant(store, until, has_blocks)
    if trace is not None and not has_blocks:
        raise ConfigError(
            f"no block-hash trace named '{trace}': the warehouse has none",
            hint="ingest a Mooncake or Bailian file first, or drop --trace",
        )
    if has_blocks:
        if trace is not None and not store.scalar("SELECT count(*) FROM block_requests WHERE trace = ?", [trace]):
            names = ", ".join(r[0] for r in store.query("SELECT DISTINCT trace FROM block_requests ORDER BY 1"))
            raise ConfigError(f"no block-hash trace named '{trace}'", hint=f"known traces: {names}")
        t = store.to_arrow(_sql("block_trace"), {"trace": trace, "since": since, "until": until})
        names = set(t.column("trace").unique().to_pylist()) if t.num_rows else set()
        name = trace or (next(iter(names)) if len(names) == 1 else "block_requests")
        return block_trace_from_table(t, name=name)
    times, parts = chain_partitions(store, since, until, partition_rows)
    with closing(parts):  # an error mid-way ends the query (and DuckDB's memory cap) at once
        return derive_partitioned(parts, len(times), params or ChainParams(), materialize, times)


def chain_partitions(store, since=None, until=None, rows: int = PARTITION_ROWS):
    """The warehouse's requests for prefix chains (``queries/chain_requests.sql``) in partitions
    of whole sessions, each of about ``rows`` rows (a longer session is one partition), so the
    derivation never holds every request's text at once. Each row gets its ``gidx``, its place in
    time order: the rows of an earlier time (``queries/chain_times.sql``) plus its ``tie``.

    Returns:
        ``(times, parts)``: every row's ``ts_us`` in time order, and an iterator of Polars frames.
    """
    import polars as pl

    from kvtrace.store.store import SORT_MEMORY, sort_memory  # DuckDB: only a warehouse's chains need it

    args = {"since": since, "until": until}
    # Capped: the view's anti-join of metric points against every request holds a hash table of them.
    with store.memory_capped(SORT_MEMORY):
        times = store.to_arrow(_sql("chain_times"), args).column("ts_us").to_numpy()
    # Sorted here, in place (a copy only of a zero-copy view): a sort in DuckDB would need memory
    # in proportion to the rows. The derived trace keeps the array as its times: read-only.
    times = np.require(times, requirements="W")
    times.sort()
    times.flags.writeable = False

    def parts():
        # The query sorts every row by session: DuckDB spills that sort rather than hold it.
        with store.memory_capped(sort_memory(len(times))):
            reader = store.arrow_batches(_sql("chain_requests"), args, min(rows, 100_000))
            try:
                held, held_rows = [], 0  # batches not yet given out, all sessions whole but the last
                for batch in reader:
                    df = pl.from_arrow(batch)
                    if not df.height:
                        continue
                    held.append(df)
                    held_rows += df.height
                    if held_rows < rows:
                        continue
                    # Rows come session by session: cut before the last session, which may go on.
                    sess = df.get_column("session_id")
                    cut = df.height - int(sess.reverse().rle().struct.field("len")[0])
                    if cut == 0 and (len(held) == 1 or held[-2].get_column("session_id")[-1] == sess[0]):
                        continue  # one session fills the batch and began before it: it may go on
                    yield _numbered(pl.concat(held[:-1] + [df.slice(0, cut)]), times)
                    held, held_rows = [df.slice(cut)], df.height - cut
                if held_rows:
                    yield _numbered(pl.concat(held), times)
            finally:
                reader.close()

    return times, parts()


def _numbered(part, times: np.ndarray):
    """A partition with each row's ``gidx`` (its place in time order) in place of its ``tie``."""
    import polars as pl

    ts, tie = part.get_column("ts_us").to_numpy(), part.get_column("tie").to_numpy()
    order = np.argsort(ts, kind="stable")  # sorted needles search several times faster
    gidx = np.empty(len(ts), dtype=np.int64)
    gidx[order] = np.searchsorted(times, ts[order], side="left")
    gidx += tie
    return part.drop("tie").with_columns(pl.Series("gidx", gidx, dtype=pl.Int64))


def _sql(name: str) -> str:
    from kvtrace.store import load_query

    return load_query(name).sql


def window_bounds(store, since: datetime | str | None, until: datetime | str | None):
    """``(since, until)`` as datetimes, as :func:`load_block_trace` reads them (a span such as
    ``7d`` counts back from the last record)."""
    blocks = store.scalar("SELECT count(*) FROM block_requests") > 0
    return _instant(store, since, blocks), _instant(store, until, blocks)


def _instant(store, v, blocks: bool):
    """A bound as a datetime; a span such as ``7d`` counts back from the last request."""
    if v is None or isinstance(v, datetime):
        return v

    table = "block_requests" if blocks else "request_usage"
    return parse_instant(str(v), store.scalar(f"SELECT max(ts) FROM {table}"))
