"""What ``kvtrace reuse`` shows: the reuse profile, the TTL what-if with the capacity each TTL
needs, and (for telemetry, or with a price model) the API spend under 5 min and 1 h TTLs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvtrace.analyze.chains import ChainParams
from kvtrace.analyze.reuse import ReuseParams
from kvtrace.analyze.token_mix import no_data_text
from kvtrace.analyze.working_set import sizing_warnings
from kvtrace.errors import ConfigError

DEFAULT_TTLS: tuple[float | None, ...] = (60.0, 300.0, 3600.0, None)


@dataclass
class ReuseOptions:
    """Inputs and assumptions of a reuse report (every field is a ``kvtrace reuse`` option)."""

    file: Path | None = None  # a Mooncake/Bailian file instead of the warehouse
    file_format: str | None = None  # mooncake or bailian (default: detected)
    file_block_size: int | None = None  # tokens per block of a file that does not say
    trace: str | None = None  # one block-hash trace of the warehouse
    since: str | None = None
    until: str | None = None
    ttls: list[float | None] = field(default_factory=lambda: list(DEFAULT_TTLS))
    chain: ChainParams = field(default_factory=ChainParams)
    reuse: ReuseParams = field(default_factory=ReuseParams)
    bytes_per_token: float | None = None  # KV bytes per token of the serving model, for bytes
    pricing: Path | None = None
    price_model: str | None = None  # price every request as this model (block-hash traces)
    series: bool = False  # working-set time series per TTL (charts)
    # requests read (or linked by a Spark task) at a time; None: the engine's own default
    partition_rows: int | None = None
    lake: str | None = None  # a lake (kvtrace lake) whose chains Spark derives, instead of the warehouse
    spark_master: str | None = None  # Spark master for a lake (default: the running session, or local[*])


def reuse_report(store, opts: ReuseOptions | None = None) -> dict:
    """Compute the reuse report of a warehouse (or of ``opts.file``; ``store`` may then be None)."""
    from kvtrace.analyze.load import load_block_trace, read_block_trace, window_bounds
    from kvtrace.analyze.reuse import reuse_profile
    from kvtrace.analyze.spend import load_pricing, spend_whatif
    from kvtrace.analyze.ttl import ttl_section

    opts = opts or ReuseOptions()
    bpt = opts.bytes_per_token
    rows = {} if opts.partition_rows is None else {"partition_rows": opts.partition_rows}  # else each engine's
    if opts.file is not None:
        trace = read_block_trace(opts.file, format=opts.file_format, block_size=opts.file_block_size)
        source = str(opts.file)
    elif opts.lake is not None:
        from kvtrace.analyze.spark import check_lake, lake_block_trace, spark_session

        if opts.since or opts.until or opts.trace:
            raise ConfigError(
                "a lake's window is the one it was written with, and it holds no block-hash traces",
                hint="drop --since/--until/--trace, or write the lake for the window: kvtrace lake DIR --since ...",
            )
        check_lake(opts.lake)  # before Spark takes its seconds to start
        with spark_session(opts.spark_master) as spark:
            trace = lake_block_trace(spark, opts.lake, opts.chain, **rows)
        source = str(opts.lake)
    else:
        if store is None:
            raise ConfigError("no warehouse and no trace file", hint="pass --db or a trace FILE")
        trace = load_block_trace(
            store,
            trace=opts.trace,
            since=opts.since,
            until=opts.until,
            params=opts.chain,
            materialize=False,
            **rows,
        )
        source = str(store.path) if store.path else "memory"
    derived = "chain" in trace.meta
    out = {
        "source": source,
        "derived": derived,
        "no_data": None,
        "params": {
            "ttls_s": list(opts.ttls),
            "idle_s": opts.reuse.idle_s,
            "bytes_per_token": bpt,
            **({"chains": asdict(opts.chain)} if derived else {}),
        },
    }
    if trace.n_requests == 0:
        out["no_data"] = (
            f"No data: {opts.file or opts.lake} holds no requests."
            if opts.file is not None or opts.lake is not None
            else no_data_text(store, *window_bounds(store, opts.since, opts.until))
        )
        out.update(
            trace=None, reuse_time=None, effective_reuse_time=None, threads=None, ttl=[], spend=None, warnings=[]
        )
        return out
    out.update(reuse_profile(trace, opts.reuse))
    out["ttl"] = ttl_section(trace, opts.ttls, bytes_per_token=bpt, series=opts.series)
    out["warnings"] = (
        [trace.meta["block_size_assumed"]] if trace.meta.get("block_size_assumed") else []
    ) + sizing_warnings(trace, opts.ttls)
    out["spend"] = None
    if derived or opts.price_model:
        out["spend"] = spend_whatif(trace, load_pricing(opts.pricing), model=opts.price_model)
    return out
