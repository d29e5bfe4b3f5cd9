"""``kvtrace reuse``: reuse profile, TTL what-if, required capacity and API spend what-if."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, KvDtypeOpt, ModelOpt, OutOpt, SinceOpt, UntilOpt, guarded, model_option, working
from kvtrace.errors import ConfigError
from kvtrace.units import parse_duration, parse_ttls
from kvtrace.report.render import print_tables
from kvtrace.report.tables import reuse_cdf_table, spend_table, ttl_table
from kvtrace.units import fmt_int, fmt_seconds, fmt_span, fmt_tokens, fmt_ttl


def reuse(
    file: Annotated[
        Optional[Path], typer.Argument(help="A Mooncake or Bailian trace file to analyse instead of the warehouse.")
    ] = None,
    input_format: Annotated[
        Optional[str],
        typer.Option(
            "--input-format",
            "-i",
            help="Read FILE as this format instead of detecting it: mooncake or bailian.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    trace: Annotated[
        Optional[str],
        typer.Option("--trace", help="One ingested block-hash trace by name (kvtrace query block_traces)."),
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    ttl: Annotated[
        Optional[list[str]],
        typer.Option(
            "--ttl",
            help="Idle TTLs for the what-if: 30s, 5m, 1h, 2d, none (repeat or comma-separate). Default 1m,5m,1h,none.",
        ),
    ] = None,
    block_size: Annotated[
        Optional[int],
        typer.Option(
            "--block-size",
            min=1,
            help="Tokens per block: of traces derived from telemetry (default 64), or of a FILE that does not say (default: the format's, with a warning).",
            show_default=False,
        ),
    ] = None,
    head_tokens: Annotated[
        Optional[int],
        typer.Option(
            "--head-tokens", help="Shared head (system prompt + tools) in tokens; default: detected; 0 disables."
        ),
    ] = None,
    chain: Annotated[
        Optional[list[str]],
        typer.Option(
            "--chain",
            help="Any other prefix-chain assumption as NAME=VALUE (repeatable): link_window, cache_ttl_s, chain_per_model, auxiliary_own_chain, compaction_ends_chain, head_min_chains, head_per_thread_kind, max_blocks.",
        ),
    ] = None,
    idle: Annotated[
        str,
        typer.Option("--idle", help="A gap within a thread longer than this is an idle period (resumption after it)."),
    ] = "5m",
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    bytes_per_token: Annotated[
        Optional[float],
        typer.Option("--bytes-per-token", help="KV bytes per token (2 x layers x kv_heads x head_dim x dtype bytes)."),
    ] = None,
    pricing: Annotated[
        Optional[Path],
        typer.Option("--pricing", help="Pricing TOML for the spend what-if (default: built-in list prices)."),
    ] = None,
    price_model: Annotated[
        Optional[str],
        typer.Option("--price-model", help="Price every request as this model (needed for block-hash traces)."),
    ] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    series: Annotated[
        bool, typer.Option("--series", help="Include the working-set time series per TTL (json).")
    ] = False,
    out: OutOpt = None,
    engine: Annotated[
        Optional[str],
        typer.Option(
            "--engine",
            help="local (this process, the warehouse; the default) or spark (a lake on Spark; the default with --lake; needs the spark extra).",
            show_default=False,
        ),
    ] = None,
    lake: Annotated[
        Optional[str],
        typer.Option(
            "--lake", help="The lake folder or URI the spark engine reads (kvtrace lake DIR).", show_default=False
        ),
    ] = None,
    spark_master: Annotated[
        Optional[str],
        typer.Option(
            "--spark-master",
            help="Master of the local Spark session kvtrace starts: local, local[N] or local[*] (the default). Leave it out under spark-submit or in a notebook: their session is used. On a cluster, run through spark-submit (docs/spark.md).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show how context is reused: reuse times, TTL hit ratios, capacity per TTL and API spend.

    Works on a warehouse of telemetry (prefix chains are derived from token counts), on ingested
    block-hash traces, or directly on a Mooncake/Bailian FILE.

    Example: kvtrace reuse --ttl 5m,1h --bytes-per-token 327680 --format json --out reuse.json

    On Spark: kvtrace lake lake/ && kvtrace reuse --engine spark --lake lake/ --format json (docs/spark.md)
    """
    from kvtrace.analyze.chains import ChainParams
    from kvtrace.analyze.reuse import ReuseParams
    from kvtrace.analyze.reuse_report import DEFAULT_TTLS, ReuseOptions, reuse_report
    from kvtrace.replay.catalog import resolve_model

    if format not in ("table", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table or json")
    spec = model_option(model, kv_dtype)
    if bytes_per_token is None and spec is not None:
        bytes_per_token = float(resolve_model(spec).bytes_per_token)
    if input_format is not None and (file is None or input_format not in ("mooncake", "bailian")):
        raise ConfigError(
            f"--input-format {input_format}: the format of a trace FILE",
            hint="give a FILE and choose mooncake or bailian",
        )
    engine = engine or ("spark" if lake is not None else "local")
    if engine not in ("local", "spark"):
        raise ConfigError(f"unknown --engine '{engine}'", hint="choose local or spark")
    if (engine == "spark") != (lake is not None):
        raise ConfigError(
            "the spark engine reads a lake, and only it does",
            hint="write one with kvtrace lake DIR, then pass --lake DIR (with --engine spark or alone)",
        )
    if lake is not None and file is not None:
        raise ConfigError("give a trace FILE or --lake, not both")
    opts = ReuseOptions(
        file=file,
        file_format=input_format,
        file_block_size=block_size,
        trace=trace,
        since=since,
        until=until,
        ttls=parse_ttls(ttl) or list(DEFAULT_TTLS),
        chain=ChainParams.from_settings(
            chain, head_tokens=head_tokens, **({} if block_size is None else {"block_size": block_size})
        ),
        reuse=ReuseParams(idle_s=parse_duration(idle, what="--idle")),
        bytes_per_token=bytes_per_token,
        pricing=pricing,
        price_model=price_model,
        series=series,
        lake=lake,
        spark_master=spark_master,
    )
    with working(f"measuring reuse in {file or lake or 'the warehouse'}"):
        if file is not None or lake is not None:
            data = reuse_report(None, opts)
        else:
            from kvtrace.store import open_store

            with open_store(db, read_only=True) as store:
                data = reuse_report(store, opts)
    if data["no_data"] and (format == "json" or out is not None):  # the table says it itself
        typer.echo(data["no_data"], err=True)
    if format == "json":
        import orjson

        text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
        if out is None:
            typer.echo(text, nl=False)
        else:
            Path(out).write_text(text)
        return
    from rich.console import Console

    if out is None:
        render(data, Console())
    else:
        with open(out, "w") as fh:
            render(data, Console(file=fh, width=120))


def render(data: dict, console) -> None:
    """The reuse report as the report's tables (reuse time, TTL what-if, spend) and two summary lines."""
    from dataclasses import replace

    tr = data.get("trace")
    if not tr:
        console.print(data.get("no_data") or "No requests in the window.", markup=False)
        return
    kind = "derived from telemetry" if data["derived"] else "block-hash trace"
    console.print(
        f"[bold]{tr['name']}[/] ({kind}): {fmt_int(tr['requests'])} requests, "
        f"{fmt_tokens(tr['prompt_tokens'])} prompt tokens in {fmt_int(tr['blocks'])} blocks of "
        f"{tr['block_size']}, {fmt_int(tr['unique_blocks'])} distinct, over {fmt_span(tr['span_s'])}"
    )
    print_tables([reuse_cdf_table(data), ttl_table(data)], console)
    th = data.get("threads")
    if th:
        console.print(
            f"Threads: {fmt_int(th['threads'])} in {fmt_int(th['sessions'])} sessions; "
            f"{fmt_int(th['chains'])} chains, {fmt_int(th['compactions'])} compactions; "
            f"{fmt_int(th['idle_periods'])} idle periods over {fmt_ttl(th['idle_threshold_s'])}, "
            f"resuming {fmt_tokens(th['resumed_prompt_tokens'])} prompt tokens; "
            f"gap p50 {fmt_seconds(th['gap_s']['p50'])}, p90 {fmt_seconds(th['gap_s']['p90'])}"
        )
    spend = spend_table(data.get("spend") or {})
    if spend is not None:
        print_tables([replace(spend, title="API spend what-if (hosted prompt caching)")], console)
    for w in data.get("warnings") or []:
        console.print(f"[yellow]Warning:[/] {w}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("reuse")(guarded(reuse))
