"""``kvtrace replay``: the capacity x TTL grid and a tier hierarchy for a trace or the warehouse."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, OutOpt, SinceOpt, UntilOpt, guarded
from kvtrace.errors import ConfigError


def _items(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def replay(
    trace: Annotated[Optional[Path], typer.Argument(help="A block trace file (Mooncake/Bailian JSONL, .npz); "
                                                         "default: the warehouse (--db).")] = None,
    db: DbOpt = None,
    trace_name: Annotated[Optional[str], typer.Option("--trace", help="One block-hash trace of the warehouse by name.")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    capacity: Annotated[Optional[list[str]], typer.Option("--capacity", "-c", help="Cache size: tokens (500K, 3M, 1G) or bytes (512GB, 2TB; needs --model); 'none' = unlimited. Repeat or comma-separate. Default: 64 sizes.")] = None,
    ttl: Annotated[Optional[list[str]], typer.Option("--ttl", help="Idle TTL: 30s, 5m, 1h, 2d, none. Repeat or comma-separate. Default: 30s..2h and none.")] = None,
    tiers: Annotated[Optional[str], typer.Option("--tiers", help="Tier hierarchy: a preset (seed-testbed, seed-testbed-raid0, h100, h200, gh200) or a TOML file.")] = None,
    tier_ttl: Annotated[Optional[str], typer.Option("--tier-ttl", help="Idle TTL of the hierarchy (default: the one --ttl if exactly one is given, else none).")] = None,
    tier_mode: Annotated[Optional[str], typer.Option("--tier-mode", help="Override the tier file's mode: exclusive or inclusive.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="KV geometry: a catalog name (kvtrace size --list) or a config.json path.")] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV cache dtype: bf16 or fp8.")] = "bf16",
    block_size: Annotated[Optional[int], typer.Option("--block-size", help="Tokens per block of a trace file (default: the format's).")] = None,
    prefill_rate: Annotated[Optional[float], typer.Option("--prefill-rate", help="TTFT: prefill tokens/s instead of the FLOPs model.")] = None,
    no_overlap: Annotated[bool, typer.Option("--no-overlap", help="TTFT: reload and prefill add up instead of overlapping.")] = False,
    resume_gap: Annotated[str, typer.Option("--resume-gap", help="TTFT: a request after a longer gap is a resumed session.")] = "5m",
    engine: Annotated[str, typer.Option("--engine", help="auto, numpy or numba.")] = "auto",
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    out: OutOpt = None,
) -> None:
    """Replay a block trace through LRU caches of every capacity x idle TTL, and through a tier hierarchy.

    Example: kvtrace replay conversation_trace.jsonl -c 1M -c 10M -c 50M --ttl 5m,1h --tiers seed-testbed --model MiniMax-M2.7 --kv-dtype fp8
    """
    from kvtrace.replay import load_tiers, replay as run, resolve_model
    from kvtrace.replay.ttft import TTFTConfig
    from kvtrace.replay.units import UNLIMITED, is_bytes, parse_bytes, parse_duration, parse_tokens

    if format not in ("table", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table or json")
    m = resolve_model(model, kv_dtype) if model else None
    caps: list[int | None] = []
    for c in _items(capacity):
        if c.lower() in UNLIMITED:
            caps.append(None)
        elif is_bytes(c):
            if m is None:
                raise ConfigError(f"--capacity {c} is in bytes", hint="pass --model to convert bytes to tokens")
            from kvtrace.replay.catalog import tokens_for_bytes
            caps.append(tokens_for_bytes(parse_bytes(c), m, block_size or 512))
        else:
            caps.append(parse_tokens(c, what="--capacity"))
    ttls = [None if parse_duration(t) == float("inf") else parse_duration(t, what="--ttl") for t in _items(ttl)]
    ts = load_tiers(tiers) if tiers else None
    if ts is not None and tier_mode:
        if tier_mode not in ("exclusive", "inclusive"):
            raise ConfigError(f"--tier-mode {tier_mode!r}", hint="choose exclusive or inclusive")
        ts.mode = tier_mode
    if tier_ttl is not None:
        tt = parse_duration(tier_ttl, what="--tier-ttl")
        tt = None if tt == float("inf") else tt
    else:
        tt = ttls[0] if len(ttls) == 1 else None
    if trace is not None:
        from kvtrace.replay.tracefile import read_trace
        bt = read_trace(trace, block_size=block_size)
    else:
        from kvtrace.analyze.load import load_block_trace
        from kvtrace.store import Store
        with Store(db, read_only=True) as store:
            bt = load_block_trace(store, trace=trace_name, since=since, until=until)
    if caps and any(is_bytes(c) for c in _items(capacity)) and bt.block_size != (block_size or 512):
        caps = [None if c is None else c // (block_size or 512) * bt.block_size for c in caps]
    cfg = TTFTConfig(overlap=not no_overlap, resume_gap_s=parse_duration(resume_gap, what="--resume-gap"),
                     prefill_tokens_per_s=prefill_rate)
    res = run(bt, capacities=caps or None, ttls=ttls or None, model=m, tiers=ts, tier_ttl=tt, ttft=cfg, engine=engine,
              release_ids=True)
    if format == "json":
        import json

        text = json.dumps(res.to_dict(), indent=1)
        if out:
            out.write_text(text + "\n")
        else:
            sys.stdout.write(text + "\n")
        return
    from rich.console import Console

    console = Console(file=open(out, "w") if out else None, width=160)
    render_table(res, console)


def render_table(res, console) -> None:
    """The replay result as terminal tables."""
    from rich.table import Table

    from kvtrace.replay.units import fmt_bytes, fmt_duration, fmt_tokens

    tr = res.trace
    console.print(f"[bold]{tr['name']}[/]: {tr['requests']:,} requests, {tr['blocks']:,} block accesses of "
                  f"{tr['block_size']} tokens, {tr['input_tokens']:,} input tokens over {fmt_duration(tr['span_s'])} "
                  f"(engine {res.engine['kernel']}, {res.engine['total_s']:.2f} s)")
    ttls = list(dict.fromkeys(g["ttl_s"] for g in res.grid))
    caps = list(dict.fromkeys(g["capacity_tokens"] for g in res.grid))
    cell = {(g["capacity_tokens"], g["ttl_s"]): g for g in res.grid}
    t = Table(title="Hit ratio (tokens; blocks in brackets) by LRU capacity and idle TTL")
    t.add_column("capacity", justify="right")
    if res.model:
        t.add_column("bytes", justify="right")
    for x in ttls:
        t.add_column(f"TTL {fmt_duration(x)}", justify="right")
    for c in caps:
        row = [fmt_tokens(c)]
        if res.model:
            row.append(fmt_bytes(cell[(c, ttls[0])]["capacity_bytes"]))
        row += [f"{cell[(c, x)]['hit_ratio_tokens']:.2%} ({cell[(c, x)]['hit_ratio_blocks']:.2%})" for x in ttls]
        t.add_row(*row)
    console.print(t)
    ws = " · ".join(f"{fmt_duration(w['ttl_s'])}: {fmt_tokens(w['peak_tokens'])}"
                    + (f" ({fmt_bytes(w['peak_bytes'])})" if w["peak_bytes"] is not None else "")
                    for w in res.working_set)
    console.print(f"Peak working set by TTL (unlimited capacity): {ws}")
    if res.tiers:
        tt = res.tiers
        t = Table(title=f"Tiers {tt['name']} ({tt['mode']}, TTL {fmt_duration(tt['ttl_s'])}): "
                        f"{tt['hit_ratio_tokens']:.2%} of input tokens hit")
        for col in ("tier", "capacity", "hit (tokens)", "reads mean/peak", "writes mean/peak", "fills", "DWPD/drive",
                    "rating"):
            t.add_column(col, justify="left" if col == "tier" else "right")
        for x in tt["tiers"]:
            rate = lambda a, b: "-" if a is None else f"{fmt_bytes(a)}/s / {fmt_bytes(b)}/s"  # noqa: E731
            t.add_row(x["name"], f"{fmt_tokens(x['capacity_tokens'])} ({fmt_bytes(x['capacity_bytes'])})",
                      f"{x['hit_ratio_tokens']:.2%}", rate(x["read_bytes_per_s_mean"], x["read_bytes_per_s_peak"]),
                      rate(x["write_bytes_per_s_mean"], x["write_bytes_per_s_peak"]), x["fills_at"] or "never",
                      "-" if x.get("dwpd_per_drive") is None else f"{x['dwpd_per_drive']:.2f}",
                      "-" if x.get("dwpd_rating") is None else f"{x['dwpd_rating']:g}")
        console.print(t)
        console.print(f"Peak rates over {fmt_duration(tt['window_s'])} windows.")
    if res.ttft:
        f = res.ttft
        t = Table(title=f"Modelled TTFT (ms; prefill by {f['prefill']['mode']}, "
                        f"{'overlapped' if f['overlap'] else 'serial'} reload; resumed after {fmt_duration(f['resume_gap_s'])})")
        for col in ("requests", "count", "p50", "p90", "p99", "max", "p50 without cache", "p99 without cache"):
            t.add_column(col, justify="left" if col == "requests" else "right")
        for name in ("all", "continuing", "resumed", "new"):
            s = f[name]
            if s["count"]:
                t.add_row(name, f"{s['count']:,}", *(f"{s[k]:,.0f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")),
                          f"{s['no_cache']['p50_ms']:,.0f}", f"{s['no_cache']['p99_ms']:,.0f}")
        console.print(t)
        avoided = ", ".join(f"{k} {v:,.0f}" for k, v in f["gpu_seconds_avoided"].items())
        console.print(f"GPU-seconds of prefill avoided per tier: {avoided} "
                      f"(of {f['gpu_seconds_no_cache']:,.0f} without any cache)")


def register(app: typer.Typer) -> None:
    app.command("replay")(guarded(replay))
