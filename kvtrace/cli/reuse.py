"""``kvtrace reuse``: reuse profile, TTL what-if, required capacity and API spend what-if."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, OutOpt, SinceOpt, UntilOpt, guarded
from kvtrace.errors import ConfigError


def reuse(
    file: Annotated[Optional[Path], typer.Argument(help="A Mooncake or Bailian trace file to analyse instead of the warehouse.")] = None,
    db: DbOpt = None,
    trace: Annotated[Optional[str], typer.Option("--trace", help="One ingested block-hash trace by name (kvtrace query block_traces).")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    ttl: Annotated[Optional[list[str]], typer.Option("--ttl", help="Idle TTLs for the what-if: 30s, 5m, 1h, 2d, none (repeat or comma-separate). Default 1m,5m,1h,none.")] = None,
    block_size: Annotated[int, typer.Option("--block-size", help="Tokens per block of traces derived from telemetry.")] = 64,
    head_tokens: Annotated[Optional[int], typer.Option("--head-tokens", help="Shared head (system prompt + tools) in tokens; default: detected; 0 disables.")] = None,
    chain: Annotated[Optional[list[str]], typer.Option("--chain", help="Any other prefix-chain assumption as NAME=VALUE (repeatable): link_window, chain_per_model, auxiliary_own_chain, compaction_ends_chain, head_min_chains, head_per_thread_kind, max_blocks.")] = None,
    idle: Annotated[str, typer.Option("--idle", help="A gap within a thread longer than this is an idle period (resumption after it).")] = "5m",
    model: Annotated[Optional[str], typer.Option("--model", help="KV geometry for bytes: a model of the catalog (kvtrace size --list).")] = None,
    bytes_per_token: Annotated[Optional[float], typer.Option("--bytes-per-token", help="KV bytes per token (2 x layers x kv_heads x head_dim x dtype bytes).")] = None,
    pricing: Annotated[Optional[Path], typer.Option("--pricing", help="Pricing TOML for the spend what-if (default: built-in list prices).")] = None,
    price_model: Annotated[Optional[str], typer.Option("--price-model", help="Price every request as this model (needed for block-hash traces).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    series: Annotated[bool, typer.Option("--series", help="Include the working-set time series per TTL (json).")] = False,
    out: OutOpt = None,
) -> None:
    """Show how context is reused: reuse times, TTL hit ratios, capacity per TTL and API spend.

    Works on a warehouse of telemetry (prefix chains are derived from token counts), on ingested
    block-hash traces, or directly on a Mooncake/Bailian FILE.

    Example: kvtrace reuse --ttl 5m,1h --bytes-per-token 327680 --format json --out reuse.json
    """
    from kvtrace.analyze.chains import ChainParams
    from kvtrace.analyze.reuse import ReuseParams
    from kvtrace.analyze.reuse_report import DEFAULT_TTLS, ReuseOptions, reuse_report
    from kvtrace.units import parse_duration, parse_ttls

    if format not in ("table", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table or json")
    opts = ReuseOptions(file=file, trace=trace, since=since, until=until,
                        ttls=parse_ttls(ttl) or list(DEFAULT_TTLS),
                        chain=ChainParams.from_settings(chain, block_size=block_size, head_tokens=head_tokens),
                        reuse=ReuseParams(idle_s=parse_duration(idle, what="--idle")), bytes_per_token=bytes_per_token,
                        model=model, pricing=pricing, price_model=price_model, series=series)
    if file is not None:
        data = reuse_report(None, opts)
    else:
        from kvtrace.store import Store

        with Store(db, read_only=True) as store:
            data = reuse_report(store, opts)
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
    """Rich tables of a reuse report."""
    from rich.table import Table

    from kvtrace.units import fmt_bytes, fmt_int, fmt_pct, fmt_seconds, fmt_span, fmt_tokens, fmt_ttl

    tr = data.get("trace")
    if not tr:
        console.print("No requests in the window.")
        return
    kind = "derived from telemetry" if data["derived"] else "block-hash trace"
    console.print(f"[bold]{tr['name']}[/] ({kind}): {fmt_int(tr['requests'])} requests, "
                  f"{fmt_tokens(tr['prompt_tokens'])} prompt tokens in {fmt_int(tr['blocks'])} blocks of "
                  f"{tr['block_size']}, {fmt_int(tr['unique_blocks'])} distinct, over {fmt_span(tr['span_s'])}")

    t = Table(title="Reuse time (token-weighted share of reuse within)")
    t.add_column("within")
    t.add_column("block age", justify="right")
    t.add_column("prefix (hit) age", justify="right")
    rt, et = data["reuse_time"], data["effective_reuse_time"]
    for a, b in zip(rt["cdf"], et["cdf"]):
        if a["t_s"] in (10, 60, 300, 900, 3600, 86400):
            t.add_row(fmt_ttl(a["t_s"]), fmt_pct(a["share_tokens"], 1), fmt_pct(b["share_tokens"], 1))
    for q in ("0.9", "0.95", "0.99"):
        v1, v2 = rt["ttl_for_share_s"][q], et["ttl_for_share_s"][q]
        t.add_row(f"TTL for {float(q):.0%}", "–" if v1 is None else fmt_ttl(round(v1)),
                  "–" if v2 is None else fmt_ttl(round(v2)))
    console.print(t)

    t = Table(title="TTL what-if (unlimited capacity, idle TTL refreshed on use)")
    for c in ("TTL", "hit (tokens)", "hit (blocks)", "held mean", "held p99", "held peak", "peak bytes"):
        t.add_column(c, justify="right")
    for e in data["ttl"]:
        ws = e["working_set"]
        t.add_row("none" if e["ttl_s"] is None else fmt_ttl(e["ttl_s"]), fmt_pct(e["hit_ratio_tokens"]),
                  fmt_pct(e["hit_ratio_blocks"]), fmt_tokens(ws["mean_tokens"]), fmt_tokens(ws["p99_tokens"]),
                  fmt_tokens(ws["peak_tokens"]), fmt_bytes(ws["peak_bytes"]))
    console.print(t)

    th = data.get("threads")
    if th:
        console.print(f"Threads: {fmt_int(th['threads'])} in {fmt_int(th['sessions'])} sessions; "
                      f"{fmt_int(th['chains'])} chains, {fmt_int(th['compactions'])} compactions; "
                      f"{fmt_int(th['idle_periods'])} idle periods over {fmt_ttl(th['idle_threshold_s'])}, "
                      f"resuming {fmt_tokens(th['resumed_prompt_tokens'])} prompt tokens; "
                      f"gap p50 {fmt_seconds(th['gap_s']['p50'])}, p90 {fmt_seconds(th['gap_s']['p90'])}")
    sp = data.get("spend")
    if sp:
        t = Table(title="API spend what-if (hosted prompt caching)")
        for c in ("TTL", "cache read", "cache write", "spend"):
            t.add_column(c, justify="right")
        if "observed" in sp:
            o = sp["observed"]
            t.add_row("as reported", fmt_tokens(o["read_tokens"]), fmt_tokens(o["write_tokens"]), f"${o['spend_usd']:,.2f}")
        for e in sp["ttl"]:
            t.add_row(e["ttl"], fmt_tokens(e["read_tokens"]), fmt_tokens(e["write_tokens"]), f"${e['spend_usd']:,.2f}")
        console.print(t)
        console.print(f"1 h instead of 5 min: {fmt_tokens(sp['writes_that_would_be_reads'])} written tokens become "
                      f"reads; net {'+' if sp['net_difference_usd'] >= 0 else '-'}${abs(sp['net_difference_usd']):,.2f} "
                      f"({sp['cheaper']} is cheaper)")
        if sp["unpriced"]:
            console.print("No price for: " + ", ".join(u["model"] for u in sp["unpriced"]) + " (see --pricing)")


def register(app: typer.Typer) -> None:
    app.command("reuse")(guarded(reuse))
