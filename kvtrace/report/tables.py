"""The report's tables, built once from ``Report.data`` and drawn by every renderer.

Each table is a :class:`TableSpec` (title, headers, rows of formatted text, notes under it);
terminal (rich), Markdown and HTML draw the same specs, so a number reads the same everywhere
and no renderer computes anything. Which tables a report has, in which order, and the titles of
the first table of each section come from :mod:`kvtrace.report.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtrace.analyze.token_mix import WRITE_KEYS
from kvtrace.units import (
    DASH,
    fmt_age,
    fmt_bytes,
    fmt_bytes_compact,
    fmt_duration,
    fmt_int,
    fmt_pct,
    fmt_tokens,
    fmt_tokens_compact,
    fmt_ttl,
    fmt_usd,
)

CLASS_LABELS = {
    "cache_read": "Cache read",
    "cache_write_5m": "Cache write (5 min)",
    "cache_write_1h": "Cache write (1 h)",
    "cache_write_unknown": "Cache write (TTL unknown)",
    "output": "Output",
    "input_uncached": "Uncached input",
}
REUSE_CDF_POINTS_S = (10, 60, 300, 900, 3600, 86400)  # rows of `kvtrace reuse`'s reuse-time table
TTL_HEADERS = ("TTL", "Hit (tokens)", "Hit (blocks)", "Working set mean", "p99", "peak", "peak bytes")


@dataclass
class TableSpec:
    key: str  # the registry section it belongs to (grid: kvtrace replay's)
    title: str | None  # None: its section's title (kvtrace.report.registry)
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    foot: tuple[str, ...] | None = None  # a total row
    notes: list[str] = field(default_factory=list)


def mix_rows(mix: dict) -> list[tuple[str, str, str]]:
    """(label, tokens, share) rows of a token mix; zero write classes are left out."""
    rows = []
    for key, label in CLASS_LABELS.items():
        if key.startswith("cache_write") and not mix[key]:
            continue
        rows.append((label, fmt_int(mix[key]), fmt_pct(mix["shares"][key])))
    return rows


def shares_line(mix: dict) -> str:
    """The seed study's four-way split: reads / creation (all write TTLs) / output / uncached input."""
    s = mix["shares"]
    parts = [
        ("Cache read", s["cache_read"]),
        ("Cache creation", sum(s[k] for k in WRITE_KEYS)),
        ("Output", s["output"]),
        ("Uncached input", s["input_uncached"]),
    ]
    return " · ".join(f"{k} {fmt_pct(v)}" for k, v in parts)


def ttl_rows(d: dict) -> list[tuple[str, ...]]:
    rows = []
    for e in d.get("ttl", []):
        ws = e["working_set"]
        rows.append(
            (
                fmt_ttl(e["ttl_s"]),
                fmt_pct(e["hit_ratio_tokens"]),
                fmt_pct(e["hit_ratio_blocks"]),
                fmt_tokens(ws["mean_tokens"]),
                fmt_tokens(ws["p99_tokens"]),
                fmt_tokens(ws["peak_tokens"]),
                fmt_bytes(ws.get("peak_bytes")),
            )
        )
    return rows


def cost_cell(e: dict) -> str:
    """An entry's list-price cost; requests of models without a price are said, not guessed."""
    text = fmt_usd(e.get("cost_usd"))
    n = e.get("unpriced_requests") or 0
    return text if not n else f"{text} (+{n:,} unpriced)"


def cost_line(d: dict) -> str | None:
    c = d.get("cost")
    if not c:
        return None
    line = f"Cost at list prices ({c.get('pricing', 'built-in')} price table): {cost_cell(c)}"
    if c.get("reported_cost_usd") is not None:
        line += f"; as the telemetry reported it: {fmt_usd(c['reported_cost_usd'])}"
    return line + "."


def mix_table(d: dict) -> TableSpec:
    mix = d["token_mix"]
    notes = [shares_line(mix)] + [x for x in [cost_line(d)] if x]
    return TableSpec(
        "token_mix",
        None,
        ("Class", "Tokens", "Share"),
        mix_rows(mix),
        foot=("Total", fmt_int(mix["total"]), "100%"),
        notes=notes,
    )


def group_table(g: str, entries: list[dict], tz: str = "UTC") -> TableSpec:
    rows = []
    for e in entries:
        m = e["token_mix"]
        writes = sum(m[k] for k in WRITE_KEYS)
        rows.append(
            (
                str(e["key"]),
                fmt_int(e["requests"]),
                fmt_int(m["total"]),
                fmt_pct(m["shares"]["cache_read"]),
                fmt_int(writes),
                fmt_int(m["output"]),
                fmt_pct(m["cache_hit_ratio"]),
                cost_cell(e),
            )
        )
    title = f"By {g}" + (f" ({tz})" if g in ("hour", "day", "week", "month") else "")
    return TableSpec(
        "groups",
        title,
        (g, "Requests", "Total tokens", "Read share", "Cache write", "Output", "Hit ratio", "Cost"),
        rows,
    )


def ttl_table(d: dict) -> TableSpec:
    return TableSpec(
        "ttl", None, TTL_HEADERS, ttl_rows(d), notes=["Unlimited capacity; an idle TTL is refreshed on every use."]
    )


def reuse_table(reuse: dict) -> TableSpec | None:
    rows = []
    for key, label in (("reuse_time", "Block age"), ("effective_reuse_time", "Effective (prefix)")):
        r = reuse.get(key)
        if not r:
            continue
        w, q, c = r.get("within", {}), r.get("quantiles_s", {}), r.get("ttl_for_share_s", {})
        rows.append(
            (
                label,
                *(fmt_pct(w.get(k)) for k in ("1m", "5m", "1h")),
                *(fmt_age(q.get(k)) for k in ("p50", "p90", "p99")),
                *(fmt_age(c.get(k)) for k in ("0.9", "0.95", "0.99")),
            )
        )
    if not rows:
        return None
    return TableSpec(
        "reuse",
        None,
        (
            "Reuse time",
            "Within 1 min",
            "Within 5 min",
            "Within 1 h",
            "p50",
            "p90",
            "p99",
            "TTL for 90% of reuse",
            "95%",
            "99%",
        ),
        rows,
    )


def reuse_cdf_table(d: dict) -> TableSpec | None:
    """The reuse-time CDF at a few ages and the TTL keeping 90/95/99% of reuse (``kvtrace reuse``)."""
    rt, et = d.get("reuse_time"), d.get("effective_reuse_time")
    if not rt or not et:
        return None
    rows = [
        (fmt_ttl(a["t_s"]), fmt_pct(a["share_tokens"], 1), fmt_pct(b["share_tokens"], 1))
        for a, b in zip(rt["cdf"], et["cdf"])
        if a["t_s"] in REUSE_CDF_POINTS_S
    ]
    for q in ("0.9", "0.95", "0.99"):
        rows.append(
            (
                f"TTL for {float(q):.0%}",
                *(
                    DASH if v is None else fmt_ttl(round(v))
                    for v in (rt["ttl_for_share_s"][q], et["ttl_for_share_s"][q])
                ),
            )
        )
    return TableSpec(
        "reuse", "Reuse time (token-weighted share of reuse within)", ("within", "block age", "prefix (hit) age"), rows
    )


def spend_table(spend: dict) -> TableSpec | None:
    if not spend.get("ttl"):
        return None
    rows = [
        (
            f"{fmt_ttl(t['ttl_s'])} TTL",
            f"×{t['write_multiplier']:g}",
            fmt_int(t["read_tokens"]),
            fmt_int(t["write_tokens"]),
            fmt_int(t["input_tokens"]),
            fmt_int(t["output_tokens"]),
            fmt_usd(t["spend_usd"]),
        )
        for t in spend["ttl"]
    ]
    obs = spend.get("observed")
    if obs:
        rows.append(
            (
                "As observed",
                "",
                fmt_int(obs.get("read_tokens")),
                fmt_int(obs.get("write_tokens")),
                "",
                "",
                fmt_usd(obs.get("spend_usd")),
            )
        )
    notes = []
    if spend.get("net_difference_usd") is not None:
        diff = spend["net_difference_usd"]
        notes.append(
            f"1 h TTL minus 5 min TTL: {'+' if diff >= 0 else '−'}{fmt_usd(abs(diff))} "
            f"({spend.get('cheaper', '?')} is cheaper); {fmt_int(spend.get('writes_that_would_be_reads'))} "
            "tokens written under 5 min would be cache reads under 1 h."
        )
    if spend.get("unpriced"):
        notes.append(
            "Not priced (no entry in the price table): "
            + ", ".join(str(u.get("model")) for u in spend["unpriced"])
            + "."
        )
    return TableSpec(
        "spend",
        None,
        (
            "Scenario",
            "Cache write price",
            "Cache read tokens",
            "Cache write tokens",
            "Uncached input",
            "Output",
            "Spend",
        ),
        rows,
        notes=notes,
    )


def tiers_intro(t: dict) -> str:
    bits = [f"Tier set {t['name']}" if t.get("name") else "Tier replay"]
    if t.get("description"):
        bits.append(f"({t['description']})")
    if t.get("mode"):
        bits.append(f"· {t['mode']} mode")
    bits.append(f"· idle TTL {fmt_ttl(t['ttl_s']) if t.get('ttl_s') else 'none'}")
    if t.get("hit_ratio_tokens") is not None:
        bits.append(f"· hit ratio through the tiers {fmt_pct(t['hit_ratio_tokens'])}")
    if t.get("miss_tokens") is not None:
        bits.append(f"· {fmt_tokens(t['miss_tokens'])} tokens re-prefilled")
    return " ".join(bits) + "."


def tier_table(t: dict, *, reads: bool = False) -> TableSpec | None:
    """The tiers of a tier replay; ``reads`` adds the read rates (``kvtrace replay`` shows them)."""
    tiers = t.get("tiers")
    if not tiers:
        return None

    def mbps(v):
        return DASH if v is None else f"{v / 1e6:,.1f}"

    rates = ("read", "write") if reads else ("write",)
    rows = [
        (
            x.get("name", "tier"),
            fmt_tokens(x.get("capacity_tokens")),
            fmt_bytes(x.get("capacity_bytes")),
            fmt_pct(x.get("hit_ratio_tokens")),
            *(mbps(x.get(f"{r}_bytes_per_s_{s}")) for r in rates for s in ("mean", "peak")),
            DASH if x.get("dwpd_per_drive") is None else f"{x['dwpd_per_drive']:.2f}",
            DASH if x.get("dwpd_rating") is None else f"{x['dwpd_rating']:g}",
            x.get("fills_at") or "never",
        )
        for x in tiers
    ]
    rate_headers = tuple(f"{r.capitalize()}s {s} (MB/s)" for r in rates for s in ("mean", "peak"))
    return TableSpec(
        "tiers",
        None,
        (
            "Tier",
            "Capacity (tokens)",
            "Capacity",
            "Hit ratio (tokens)",
            *rate_headers,
            "DWPD per drive",
            "Drive rating",
            "First fills",
        ),
        rows,
        notes=[tiers_intro(t)],
    )


def _size(tokens, nbytes) -> str:
    return fmt_tokens(tokens) + ("" if nbytes is None else f" · {fmt_bytes(nbytes)}")


def capacity_table(t: dict) -> TableSpec | None:
    """Per TTL, the capacity (tokens, and bytes with a model) reaching 90%, 99% and 100% of the
    hit ratio that TTL allows, and the hit ratio at each tier's depth (``tiers.capacity``)."""
    cap = t.get("capacity")
    if not cap:
        return None
    names = [x["name"] for x in cap[0].get("tiers", [])]
    rows = []
    for c in cap:
        reach = {r["share"]: r for r in c.get("reach", [])}
        rows.append(
            (
                fmt_ttl(c["ttl_s"]),
                fmt_pct(c["hit_ratio_tokens"]),
                *(
                    _size(reach[s]["capacity_tokens"], reach[s]["capacity_bytes"]) if s in reach else DASH
                    for s in (0.9, 0.99, 1.0)
                ),
                *(f"{fmt_pct(x['hit_ratio_tokens'])} ({fmt_pct(x['share_of_ceiling'], 1)})" for x in c["tiers"]),
            )
        )
    headers = (
        "TTL",
        "Hit ratio it allows",
        "90% of it needs",
        "99% needs",
        "100% needs",
        *(f"{n} (to {_size(x['depth_tokens'], x['depth_bytes'])})" for n, x in zip(names, cap[0]["tiers"])),
    )
    notes = [
        "X% of it needs: the smallest LRU capacity whose hit ratio reaches X% of what the TTL allows "
        "(unlimited capacity); 100% loses no hit to eviction, and the peak working set is an upper bound of it."
    ]
    if names:
        notes.append(
            "A tier's column: the hit ratio of the tiers down to it (one LRU stack, the tier's depth) at "
            "that TTL, and its share of what the TTL allows."
        )
    return TableSpec("tiers", "Capacity for each TTL", headers, rows, notes=notes)


def grid_table(t: dict) -> TableSpec | None:
    """Hit ratio by LRU capacity x idle TTL from a replay's ``grid`` (``kvtrace replay``)."""
    grid = t.get("grid")
    if not grid:
        return None
    ttls = list(dict.fromkeys(g["ttl_s"] for g in grid))
    caps = list(dict.fromkeys(g["capacity_tokens"] for g in grid))
    cell = {(g["capacity_tokens"], g["ttl_s"]): g for g in grid}
    with_bytes = bool(t.get("model"))
    rows = []
    for c in caps:
        row = [fmt_tokens_compact(c)]
        if with_bytes:
            row.append(fmt_bytes_compact(cell[(c, ttls[0])]["capacity_bytes"]))
        row += [f"{cell[(c, x)]['hit_ratio_tokens']:.2%} ({cell[(c, x)]['hit_ratio_blocks']:.2%})" for x in ttls]
        rows.append(tuple(row))
    headers = ("capacity", *(("bytes",) if with_bytes else ()), *(f"TTL {fmt_duration(x)}" for x in ttls))
    return TableSpec("grid", "Hit ratio (tokens; blocks in brackets) by LRU capacity and idle TTL", headers, rows)


def ttft_table(ttft: dict) -> TableSpec | None:
    def ms(q, k):
        return DASH if not q or q.get(k) is None else f"{q[k]:,.1f}"

    rows = []
    for key, label in (
        ("all", "All requests"),
        ("continuing", "Continuing"),
        ("resumed", "Resumed after idle"),
        ("new", "New session"),
    ):
        q = ttft.get(key)
        if q and q.get("count"):
            nc = q.get("no_cache")
            rows.append(
                (
                    label,
                    fmt_int(q.get("count")),
                    *(ms(q, k) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")),
                    ms(nc, "p50_ms"),
                    ms(nc, "p99_ms"),
                )
            )
    if not rows:
        return None
    notes = []
    if ttft.get("gpu_seconds_avoided"):
        total = ttft.get("gpu_seconds_no_cache")
        notes.append(
            "GPU-seconds of prefill avoided per tier: "
            + ", ".join(f"{k} {v:,.0f}" for k, v in ttft["gpu_seconds_avoided"].items())
            + ("" if total is None else f" (of {total:,.0f} without any cache)")
            + "."
        )
    return TableSpec(
        "ttft",
        "Time to first token (modelled)",
        (
            "Session",
            "Requests",
            "p50 (ms)",
            "p90 (ms)",
            "p99 (ms)",
            "max (ms)",
            "p50 without cache (ms)",
            "p99 without cache (ms)",
        ),
        rows,
        notes=notes,
    )


# -- the serving model (a ``kvtrace.simulate/1`` dict: the report's ``simulate`` section, or the
# page of ``kvtrace simulate --format html``) -----------------------------------------------------

SIM_COHORTS = (("new", "New session"), ("continuing", "Continuing"), ("resumed", "Resumed after idle"))


def _s2(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def sim_throughput_table(res: dict, title: str | None = None, notes: list[str] | None = None) -> TableSpec:
    """Per configuration: nodes, peak and steady processed tokens/s and their ratios to the first,
    GPU busy share, cost per million processed tokens."""
    rows = []
    for c in res["configs"]:
        usd = c["cost"]["usd_per_million_processed_tokens"]
        rows.append(
            (
                c["name"],
                str(c.get("nodes", 1)),
                f"{c['peak_tokens_per_s']:,.0f}",
                f"{c['steady_tokens_per_s']:,.0f}",
                _ratio(c["ratio_peak"]),
                _ratio(c["ratio_steady"]),
                f"{c['gpu_busy']:.0%}",
                "-" if usd is None else f"{usd:.3f}",
            )
        )
    return TableSpec(
        "simulate",
        title,
        (
            "Configuration",
            "Nodes",
            "Peak tok/s",
            "Steady tok/s",
            "Peak ratio",
            "Steady ratio",
            "GPU busy",
            "$ / M processed tokens",
        ),
        rows,
        notes=list(notes or []),
    )


def _ratio(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def sim_tier_table(res: dict, title: str | None = None) -> TableSpec:
    """Per configuration and tier (the GPU first): capacity, first fill, hit ratio, read and write
    rates (means over the run), writes by cause, DWPD per drive."""
    from kvtrace.simulate.render import causes_text  # here: the simulate package costs a report 0.2 s

    rows = []
    for c in res["configs"]:
        for t in c["tiers"]:
            ff, dw = t["first_full_s"], t.get("dwpd_per_drive")
            rows.append(
                (
                    c["name"],
                    t["name"],
                    fmt_bytes(t["capacity_bytes"]),
                    "never" if ff is None else f"{ff / 60:.1f} min",
                    f"{t['hit_ratio']:.1%}",
                    fmt_bytes(t["read_bytes_per_s"]) + "/s",
                    fmt_bytes(t["write_bytes_per_s"]) + "/s",
                    causes_text(t),
                    "-" if dw is None else f"{dw:.2f}",
                )
            )
    return TableSpec(
        "simulate",
        title,
        (
            "Configuration",
            "Tier",
            "Capacity",
            "First full",
            "Hit ratio",
            "Reads/s",
            "Writes/s",
            "Writes by cause",
            "DWPD",
        ),
        rows,
    )


def sim_ttft_table(res: dict, title: str | None = None) -> TableSpec:
    """Per configuration and cohort: TTFT p50 / p90 / p99 / max and the p50 of its parts (with a
    client-side cap, and the wait at the client before a request was sent)."""
    keys = ["p50_s", "p90_s", "p99_s", "max_s", "queue_p50_s", "load_p50_s", "prefill_p50_s"]
    capped = bool(res.get("max_in_flight"))
    if capped:
        keys += ["client_wait_p50_s", "client_wait_max_s"]
    rows = []
    for c in res["configs"]:
        for key, label in SIM_COHORTS:
            v = c["ttft"][key]
            rows.append((c["name"], label, str(v["count"]), *(_s2(v[k]) for k in keys)))
    return TableSpec(
        "simulate",
        title,
        (
            "Configuration",
            "Cohort",
            "Requests",
            "p50 s",
            "p90 s",
            "p99 s",
            "max s",
            "queue p50",
            "load p50",
            "prefill p50",
            *(("client wait p50", "client wait max") if capped else ()),
        ),
        rows,
    )


def sim_run_line(res: dict) -> str:
    """What was simulated: the span, the sessions, the node."""
    from kvtrace.simulate.render import warmup_note

    node = res["node"]
    return (
        f"{res['duration_s'] / 3600:.3g} h of {res['sessions']} sessions{warmup_note(res)} on "
        f"{node['gpus']} x {node['gpu']}, "
        f"{node['model']} ({node['kv_dtype']} KV); efficiencies prefill {node['prefill_efficiency']:g}, "
        f"decode {node['decode_efficiency']:g}"
        + (
            f"; at most {res['max_in_flight']} requests in flight per node, TTFT timed from sending"
            if res.get("max_in_flight")
            else ""
        )
    )


def simulate_tables(sim: dict) -> list[TableSpec]:
    """The report's ``simulate`` section: throughput (titled by the section), tiers, TTFT."""
    first = sim["configs"][0]["name"]
    notes = [
        f"Closed-loop serving model of the window's requests: {sim_run_line(sim)}. Processed tokens/s "
        f"count every prompt token (cached included) plus output; steady is the mean of the last hour; "
        f"ratios are to {first}."
    ]
    unserved = {c["name"]: c["ttft"]["unserved"] for c in sim["configs"] if c["ttft"]["unserved"]}
    if unserved:
        notes.append(
            "Requests still without a first token when the run ended: "
            + ", ".join(f"{k} {v:,}" for k, v in unserved.items())
            + "."
        )
    return [
        sim_throughput_table(sim, notes=notes),
        sim_tier_table(sim, "Serving model: tiers (hit ratio of prompt tokens; rates are means over the run)"),
        sim_ttft_table(sim, "Serving model: time to first token by cohort (seconds)"),
    ]


def sim_assumptions(sim: dict | None) -> list[str]:
    """What the report's ``simulate`` section rests on, one sentence each (the page folds them)."""
    if not sim:
        return []
    node, pol = sim["node"], sim["policy"]
    kv = ", ".join(f"{c['name']} {fmt_tokens(c['gpu_kv_tokens'])}" for c in sim["configs"])
    return [
        "Sessions: every thread of the window's sessions is a closed-loop client. It starts at its recorded "
        "first request and sends each next request its recorded gap after the simulated response ends, so a "
        "slower configuration stretches the sessions (docs/simulate.md).",
        f"Span: {sim['duration_s'] / 60:,.0f} min, from the window's first request to 5 minutes after its last.",
        f"Node: {node['gpus']} x {node['gpu']}, {node['model']} ({node['kv_dtype']} KV); GPU KV cache in tokens: "
        f"{kv} (the tier file's HBM less the weights). Step cost from the hardware catalog at prefill efficiency "
        f"{node['prefill_efficiency']:g} and decode efficiency {node['decode_efficiency']:g}, uncalibrated "
        "(kvtrace simulate --calibrate fits them to a measured throughput).",
        f"Offload: {pol['tier_mode']} tiers, {pol['chunk_tokens']}-token chunks, store {pol['store']}, "
        f"loads {pol['load']}, write-back {'on' if pol['write_back'] else 'off'}; {node['max_num_seqs']} sequences "
        f"and {node['max_num_batched_tokens']:,} tokens per step at most.",
        "kvtrace simulate --sessions warehouse with this window's --since and --until, --duration "
        f"{sim['duration_s'] / 60:.0f}m, the same --model and the same --config values gives the same figures "
        "(and, with --format html, its own page).",
    ]
