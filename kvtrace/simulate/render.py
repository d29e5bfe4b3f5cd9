"""Terminal tables of a ``simulate()`` result (rich), configurations side by side."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvtrace.units import fmt_bytes


def _s(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _min(v) -> str:
    return "never" if v is None else f"{v / 60:.1f} min"


def causes_text(tier: dict) -> str:
    """A tier's mean write rates by cause, the non-zero ones: ``spill 1.5 GB/s``."""
    by = tier.get("write_bytes_per_s_by_cause") or {}
    return ", ".join(f"{c.replace('_', '-')} {fmt_bytes(v)}/s" for c, v in by.items() if v) or "-"


def render_table(res: dict, console: Console) -> None:
    node = res["node"]
    console.print(
        f"[bold]{res['scenario']}[/bold]: {res['duration_s'] / 3600:.3g} h of {res['sessions']} sessions"
        f"{warmup_note(res)}; "
        f"{node['gpus']} x {node['gpu']}, {node['model']} ({node['kv_dtype']} KV), "
        f"efficiencies prefill {node['prefill_efficiency']:g} / decode {node['decode_efficiency']:g}"
    )
    if any(c.get("nodes", 1) > 1 for c in res["configs"]):
        console.print(f"Fleets behind a {res['router']} router")
    t = Table(title="Throughput (processed = all prompt tokens + output, per second)")
    for col in (
        "config",
        "nodes",
        "peak tok/s",
        "steady tok/s",
        "peak ratio",
        "steady ratio",
        "computed steady tok/s",
        "GPU busy",
        "preemptions",
    ):
        t.add_column(col, justify="right" if col != "config" else "left")
    for c in res["configs"]:
        t.add_row(
            c["name"],
            str(c.get("nodes", 1)),
            f"{c['peak_tokens_per_s']:,.0f}",
            f"{c['steady_tokens_per_s']:,.0f}",
            _ratio(c["ratio_peak"]),
            _ratio(c["ratio_steady"]),
            f"{c['computed_steady_tokens_per_s']:,.0f}",
            f"{c['gpu_busy']:.0%}",
            str(c["preemptions"]),
        )
    console.print(t)
    t = Table(title="Tiers")
    for col in (
        "config",
        "tier",
        "capacity",
        "first full",
        "hit ratio",
        "reads/s",
        "writes/s",
        "writes/s peak",
        "writes by cause",
        "DWPD",
    ):
        t.add_column(col, justify="right" if col not in ("config", "tier", "writes by cause") else "left")
    for c in res["configs"]:
        for tr in c["tiers"]:
            dwpd = tr.get("dwpd_per_drive")
            t.add_row(
                c["name"],
                tr["name"],
                fmt_bytes(tr["capacity_bytes"]),
                _min(tr["first_full_s"]),
                f"{tr['hit_ratio']:.1%}",
                fmt_bytes(tr["read_bytes_per_s"]) + "/s",
                fmt_bytes(tr["write_bytes_per_s"]) + "/s",
                fmt_bytes(tr.get("write_bytes_per_s_peak", 0.0)) + "/s",
                causes_text(tr),
                "-" if dwpd is None else f"{dwpd:.2f}",
            )
    console.print(t)
    capped = bool(res.get("max_in_flight"))
    title = "TTFT by cohort, seconds (p50 / p90 / p99 / max; p50 of queue, load, prefill"
    title += "; from when sent, after the p50 / max wait at the client)" if capped else ")"
    t = Table(title=title)
    cols = ["config", "cohort", "requests", "p50", "p90", "p99", "max", "queue", "load", "prefill"]
    for col in cols + (["client p50", "client max"] if capped else []):
        t.add_column(col, justify="right" if col not in ("config", "cohort") else "left")
    for c in res["configs"]:
        for k in ("new", "continuing", "resumed"):
            v = c["ttft"][k]
            row = [
                c["name"],
                k,
                str(v["count"]),
                _s(v["p50_s"]),
                _s(v["p90_s"]),
                _s(v["p99_s"]),
                _s(v["max_s"]),
                _s(v["queue_p50_s"]),
                _s(v["load_p50_s"]),
                _s(v["prefill_p50_s"]),
            ]
            if capped:
                row += [_s(v["client_wait_p50_s"]), _s(v["client_wait_max_s"])]
            t.add_row(*row)
    console.print(t)


def _ratio(v) -> str:
    """A ratio to the first configuration; none when that one served nothing."""
    return "-" if v is None else f"{v:.2f}x"


def warmup_note(res: dict) -> str:
    """`` after a warm-up of 30 min`` when the run had one."""
    w = res.get("warmup_s") or 0
    return f" after a warm-up of {w / 60:g} min" if w else ""
