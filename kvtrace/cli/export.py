"""``kvtrace export``: the warehouse's block trace as Mooncake JSONL (Dynamo replay, AIPerf)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, OutOpt, SinceOpt, UntilOpt, guarded


def export(
    format: Annotated[str, typer.Option("--format", "-f", help="Output format: mooncake.")] = "mooncake",
    out: OutOpt = None,
    db: DbOpt = None,
    trace: Annotated[Optional[str], typer.Option("--trace", help="One ingested block-hash trace by name.")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    block_size: Annotated[
        int, typer.Option("--block-size", help="Tokens per block of traces derived from telemetry.")
    ] = 64,
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
    absolute: Annotated[
        bool, typer.Option("--absolute", help="Timestamps in ms since the epoch instead of from the first request.")
    ] = False,
) -> None:
    """Export the block trace (ingested, or derived from telemetry by prefix chains) as Mooncake JSONL.

    One line per request: {"timestamp": ms, "input_length", "output_length", "hash_ids"}, the
    input of NVIDIA Dynamo's replay and AIPerf (tell them the block size: 512 for Mooncake's own
    traces, --block-size for derived ones).

    Example: kvtrace export --format mooncake --out fleet.jsonl --since 7d
    """
    from kvtrace.analyze.chains import ChainParams
    from kvtrace.analyze.export import export_warehouse
    from kvtrace.store import open_store

    with open_store(db, read_only=True) as store:
        info = export_warehouse(
            store,
            out,
            format=format,
            trace=trace,
            since=since,
            until=until,
            params=ChainParams.from_settings(chain, block_size=block_size, head_tokens=head_tokens),
            absolute=absolute,
        )
    if out is not None:
        typer.echo(
            f"wrote {info['requests']:,} requests ({info['blocks']:,} blocks of {info['block_size']} tokens) to {out}",
            err=True,
        )


def register(app: typer.Typer) -> None:
    app.command("export")(guarded(export))
