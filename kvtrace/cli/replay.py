"""``kvtrace replay``: the capacity x TTL grid and a tier hierarchy for a trace or the warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import (
    DbOpt,
    KvDtypeOpt,
    ModelOpt,
    OutOpt,
    SinceOpt,
    UntilOpt,
    emit_text,
    guarded,
    model_option,
    progress_bar,
    working,
)
from kvtrace.errors import ConfigError
from kvtrace.units import UNLIMITED, is_bytes, parse_bytes, parse_duration, parse_tokens, split_items
from kvtrace.report.replay_tables import render_table
from kvtrace.analyze.token_mix import no_data_text


def replay(
    trace: Annotated[
        Optional[Path],
        typer.Argument(help="A block trace file (Mooncake/Bailian JSONL, .npz); default: the warehouse (--db)."),
    ] = None,
    input_format: Annotated[
        Optional[str],
        typer.Option(
            "--input-format",
            "-i",
            help="Read TRACE as this format instead of detecting it: mooncake, bailian or npz.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    trace_name: Annotated[
        Optional[str], typer.Option("--trace", help="One block-hash trace of the warehouse by name.")
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    capacity: Annotated[
        Optional[list[str]],
        typer.Option(
            "--capacity",
            "-c",
            help="Cache size: tokens (500K, 3M, 1G) or bytes (512GB, 2TB; needs --model); 'none' = unlimited. Repeat or comma-separate. Default: 64 sizes.",
        ),
    ] = None,
    ttl: Annotated[
        Optional[list[str]],
        typer.Option(
            "--ttl", help="Idle TTL: 30s, 5m, 1h, 2d, none. Repeat or comma-separate. Default: 30s..2h and none."
        ),
    ] = None,
    tiers: Annotated[
        Optional[str],
        typer.Option(
            "--tiers",
            help="Tier hierarchy: a preset (seed-testbed, seed-testbed-raid0, h100, h200, gh200) or a TOML file shaped like the presets in kvtrace/replay/data/tiers/.",
        ),
    ] = None,
    tier_ttl: Annotated[
        Optional[str],
        typer.Option(
            "--tier-ttl", help="Idle TTL of the hierarchy (default: the one --ttl if exactly one is given, else none)."
        ),
    ] = None,
    tier_mode: Annotated[
        Optional[str], typer.Option("--tier-mode", help="Override the tier file's mode: exclusive or inclusive.")
    ] = None,
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    block_size: Annotated[
        Optional[int],
        typer.Option(
            "--block-size",
            help="Tokens per block of a trace file without its own (kvtrace export writes it on every line; default: the format's, with a warning).",
        ),
    ] = None,
    prefill_rate: Annotated[
        Optional[float], typer.Option("--prefill-rate", help="TTFT: prefill tokens/s instead of the FLOPs model.")
    ] = None,
    no_overlap: Annotated[
        bool, typer.Option("--no-overlap", help="TTFT: reload and prefill add up instead of overlapping.")
    ] = False,
    resume_gap: Annotated[
        str, typer.Option("--resume-gap", help="TTFT: a request after a longer gap is a resumed session.")
    ] = "5m",
    engine: Annotated[str, typer.Option("--engine", help="auto, numpy or numba.")] = "auto",
    sample: Annotated[
        Optional[str],
        typer.Option(
            "--sample",
            help="Replay a sample of the block ids (SHARDS): a rate such as 1% or 0.01. The grid and tiers are estimates; the output states the rate and the expected error. Not with TTFT or the capacity table.",
        ),
    ] = None,
    sample_size: Annotated[
        Optional[str],
        typer.Option(
            "--sample-size",
            help="Sample at most this many distinct blocks (SHARDS fixed size: the rate adapts), e.g. 1M.",
        ),
    ] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    out: OutOpt = None,
) -> None:
    """Replay a block trace through LRU caches of every capacity x idle TTL, and through a tier hierarchy.

    Example: kvtrace replay conversation_trace.jsonl -c 1M -c 10M -c 50M --ttl 5m,1h --tiers seed-testbed --model MiniMax-M2.7:fp8

    Example (a 1% sample of a large trace): kvtrace replay fleet.npz --sample 1%
    """
    from kvtrace.replay import load_tiers, replay as run, resolve_model
    from kvtrace.replay.ttft import TTFTConfig

    if format not in ("table", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table or json")
    if input_format is not None and (trace is None or input_format not in ("mooncake", "bailian", "npz")):
        raise ConfigError(
            f"--input-format {input_format}: the format of a TRACE file",
            hint="give a TRACE and choose mooncake, bailian or npz",
        )
    sampling = None
    if sample is not None or sample_size is not None:
        from kvtrace.replay.sample import Sampling, parse_rate, sampled_replay

        if sample is not None and sample_size is not None:
            raise ConfigError(
                "--sample and --sample-size both given", hint="give a rate (--sample 1%) or a size, not both"
            )
        sampling = (
            Sampling(rate=parse_rate(sample))
            if sample is not None
            else Sampling(size=parse_tokens(sample_size, what="--sample-size"))
        )
    spec = model_option(model, kv_dtype)
    m = resolve_model(spec) if spec else None
    raw_caps = split_items(capacity)
    for c in raw_caps:  # fail on a typo before reading a large trace
        if is_bytes(c) and m is None:
            raise ConfigError(f"--capacity {c} is in bytes", hint="pass --model to convert bytes to tokens")
        if not is_bytes(c) and c.lower() not in UNLIMITED:
            parse_tokens(c, what="--capacity")
    ttls = [
        None if (v := parse_duration(t, what="--ttl", unlimited=True)) == float("inf") else v for t in split_items(ttl)
    ]
    ts = load_tiers(tiers) if tiers else None
    if ts is not None and tier_mode:
        if tier_mode not in ("exclusive", "inclusive"):
            raise ConfigError(f"--tier-mode {tier_mode!r}", hint="choose exclusive or inclusive")
        ts.mode = tier_mode
    if tier_ttl is not None:
        tt = parse_duration(tier_ttl, what="--tier-ttl", unlimited=True)
        tt = None if tt == float("inf") else tt
    else:
        tt = ttls[0] if len(ttls) == 1 else None
    with working(f"reading {trace or 'the block trace'}"):
        if trace is not None:
            from kvtrace.replay.tracefile import read_trace

            bt = read_trace(trace, block_size=block_size, format=input_format)
        else:
            from kvtrace.analyze.load import load_block_trace
            from kvtrace.store import open_store

            with open_store(db, read_only=True) as store:
                bt = load_block_trace(store, trace=trace_name, since=since, until=until)
                if bt.n_requests == 0:
                    from kvtrace.analyze.load import window_bounds

                    empty = no_data_text(store, *window_bounds(store, since, until))
                    _say_no_data(empty, format, out)
                    return
    from kvtrace.replay.catalog import tokens_for_bytes

    caps: list[int | None] = []
    for c in raw_caps:  # bytes hold whole blocks of the trace's block size
        if c.lower() in UNLIMITED:
            caps.append(None)
        elif is_bytes(c):
            caps.append(tokens_for_bytes(parse_bytes(c), m, bt.block_size))
        else:
            caps.append(parse_tokens(c, what="--capacity"))
    cfg = TTFTConfig(
        overlap=not no_overlap,
        resume_gap_s=parse_duration(resume_gap, what="--resume-gap", unlimited=True),
        prefill_tokens_per_s=prefill_rate,
    )
    if sampling is not None:
        with working(f"replaying a sample of {len(bt.ts):,} requests"):
            res = sampled_replay(
                bt,
                sampling,
                capacities=caps or None,
                ttls=ttls or None,
                model=m,
                tiers=ts,
                tier_ttl=tt,
                release_ids=True,
            )
    else:
        with progress_bar(f"replaying {len(bt.ts):,} requests") as report:
            res = run(
                bt,
                capacities=caps or None,
                ttls=ttls or None,
                model=m,
                tiers=ts,
                tier_ttl=tt,
                ttft=cfg,
                engine=engine,
                release_ids=True,
                progress=report,
            )
    if format == "json":
        import json

        emit_text(json.dumps(res.to_dict(), indent=1) + "\n", out)
        return
    from rich.console import Console

    console = Console(file=open(out, "w") if out else None, width=160)
    render_table(res, console)


def _say_no_data(line: str, format: str, out: Path | None) -> None:
    """A replay over no requests: the line, on the terminal, and as ``{"no_data": ...}`` in JSON."""
    if format == "json":
        import json

        emit_text(json.dumps({"no_data": line}, indent=1) + "\n", out)
        typer.echo(line, err=True)
        return
    if out:
        emit_text(line + "\n", out)
        typer.echo(line, err=True)
    else:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("replay")(guarded(replay))
