"""``kvtrace size``: KV bytes per token, capacity for a rate x TTL, DWPD of a write rate."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvtrace.cli._options import KvDtypeOpt, ModelOpt, guarded, model_option
from kvtrace.errors import ConfigError
from kvtrace.units import fmt_bytes_compact, is_bytes, parse_bytes, parse_duration, parse_rate, parse_tokens


def size(
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    block_size: Annotated[
        Optional[int], typer.Option("--block-size", help="Also give bytes per block of this many tokens.")
    ] = None,
    rate: Annotated[Optional[str], typer.Option("--rate", help="KV tokens per second (4200, 4.2K).")] = None,
    ttl: Annotated[
        Optional[str], typer.Option("--ttl", help="Hold time: 5m, 1h, 2d. With --rate: the capacity needed.")
    ] = None,
    capacity: Annotated[
        Optional[str],
        typer.Option("--capacity", help="A capacity in tokens (15M) or bytes (512GB). With --rate: how long it holds."),
    ] = None,
    write_rate: Annotated[
        Optional[str],
        typer.Option("--write-rate", help="Sustained writes, bytes/s: 1.9GB/s (default: --rate x bytes per token)."),
    ] = None,
    drives: Annotated[Optional[str], typer.Option("--drives", help="Drive set as COUNTxSIZE: 8x12.8TB.")] = None,
    raid: Annotated[
        str, typer.Option("--raid", help="RAID level of the drives: 0, 1 or 10 (mirrors write twice).")
    ] = "0",
    waf: Annotated[float, typer.Option("--waf", help="Write amplification of the drives.")] = 1.0,
    dwpd_rating: Annotated[Optional[float], typer.Option("--dwpd-rating", help="The drives' endurance rating.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the catalog's models and the tier presets.")] = False,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
) -> None:
    """Size a KV cache: bytes per token, capacity for a rate x TTL, minutes a capacity holds, drive DWPD.

    Example: kvtrace size --model MiniMax-M2.7:fp8 --rate 4200 --ttl 1h --write-rate 1.9GB/s --drives 8x12.8TB --raid 10
    """
    from kvtrace.replay import catalog_names, preset_names, resolve_model, size_calc
    from kvtrace.replay.size import parse_drives

    if format not in ("table", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table or json")
    if list_:
        rows = []
        for name in catalog_names():
            m = resolve_model(name, kv_dtype)
            rows.append({"model": name, "bytes_per_token": m.bytes_per_token, "kv_dtype": m.kv_dtype})
        if format == "json":
            import json

            typer.echo(json.dumps({"models": rows, "tier_presets": preset_names()}, indent=1))
        else:
            for r in rows:
                typer.echo(
                    f"{r['model']:22} {r['bytes_per_token']:>9,} B/token ({fmt_bytes_compact(r['bytes_per_token'])}, {r['kv_dtype']})"
                )
            typer.echo("tier presets: " + ", ".join(preset_names()))
        return
    spec = model_option(model, kv_dtype)
    m = resolve_model(spec) if spec else None
    cap_t = cap_b = None
    if capacity:
        if is_bytes(capacity):
            cap_b = parse_bytes(capacity, what="--capacity")
        else:
            cap_t = parse_tokens(capacity, what="--capacity")
    d = parse_drives(drives, raid, waf, dwpd_rating) if drives else None
    out = size_calc(
        m,
        rate_tokens_s=float(parse_tokens(rate, what="--rate")) if rate else None,
        ttl_s=parse_duration(ttl, what="--ttl", unlimited=True) if ttl else None,
        write_bytes_s=parse_rate(write_rate, what="--write-rate") if write_rate else None,
        drives=d,
        capacity_tokens=cap_t,
        capacity_bytes=cap_b,
        block_size=block_size,
    )
    if format == "json":
        import json

        typer.echo(json.dumps(out, indent=1))
        return
    labels = {
        "bytes_per_token": "bytes per token",
        "bytes_per_block": "bytes per block",
        "capacity_tokens": "capacity (tokens)",
        "capacity_bytes": "capacity (bytes)",
        "minutes_held": "minutes held at the rate",
        "write_bytes_per_s": "writes (bytes/s)",
        "rate_tokens_per_s": "rate (tokens/s)",
        "ttl_s": "TTL (s)",
        "drive_size_bytes": "drive size",
        "usable_bytes": "usable capacity",
        "dwpd_per_drive": "DWPD per drive",
    }
    for k, v in out.items():
        if k == "warnings":
            continue
        if k == "bytes_per_token":
            shown = f"{v:,} B ({fmt_bytes_compact(v)})"
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and "bytes" in k:
            shown = f"{v:,.0f} ({fmt_bytes_compact(v)}{'/s' if k.endswith('_per_s') else ''})"
        elif isinstance(v, float) and k in ("dwpd_per_drive", "minutes_held", "waf", "dwpd_rating"):
            shown = f"{v:.3g}"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            shown = f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"
        else:
            shown = str(v)
        typer.echo(f"{labels.get(k, k.replace('_', ' ')):26} {shown}")
    for w in out.get("warnings", []):
        typer.echo(f"Warning: {w}")


def register(app: typer.Typer) -> None:
    app.command("size")(guarded(size))
