"""The index of scheduled runs: ``OUTROOT/index.html`` (and ``index.json``) lists every run of
every profile with its headline numbers and the change against the profile's previous period.

Each run folder carries ``summary.json`` (written by :mod:`kvtrace.schedule.run`); the index is
rebuilt from those files, so deleting a run folder and re-running any profile fixes the index.
"""

from __future__ import annotations

import fcntl
import html
import json
from datetime import datetime, timezone
from pathlib import Path

from kvtrace.errors import ConfigError
from kvtrace.schedule.periods import period_for
from kvtrace.units import fmt_bytes, fmt_int, fmt_pct, fmt_tokens, fmt_ttl, fmt_usd
from kvtrace.report.files import write_atomic

SHARES = ("cache_read", "cache_creation", "output", "input_uncached")


def summarize(d: dict) -> dict:
    """The headline numbers of a report dict (a reshaping: nothing is recomputed)."""
    mix = d["token_mix"]
    s = mix["shares"]
    out = {
        "requests": d["requests"],
        "sessions": d["sessions"],
        "total_tokens": mix["total"],
        "shares": {
            "cache_read": s["cache_read"],
            "cache_creation": s["cache_write_5m"] + s["cache_write_1h"] + s["cache_write_unknown"],
            "output": s["output"],
            "input_uncached": s["input_uncached"],
        },
        "cache_hit_ratio": mix["cache_hit_ratio"],
        "cost_usd": (d.get("cost") or {}).get("cost_usd"),
        "required_capacity": [],
    }
    for e in d.get("ttl") or []:
        ws = e.get("working_set") or {}
        out["required_capacity"].append(
            {
                "ttl_s": e["ttl_s"],
                "hit_ratio_tokens": e.get("hit_ratio_tokens"),
                "peak_tokens": ws.get("peak_tokens"),
                "p99_tokens": ws.get("p99_tokens"),
                "peak_bytes": ws.get("peak_bytes"),
            }
        )
    return out


def _rel(cur, prev):
    return None if cur is None or not prev else cur / prev - 1.0


def changes(cur: dict, prev: dict | None) -> dict | None:
    """Period-over-period changes: relative for counts and capacities, points for shares and ratios."""
    if prev is None:
        return None
    caps = {c["ttl_s"]: c for c in prev.get("required_capacity", [])}
    return {
        "requests": _rel(cur["requests"], prev["requests"]),
        "total_tokens": _rel(cur["total_tokens"], prev["total_tokens"]),
        "cost_usd": _rel(cur.get("cost_usd"), prev.get("cost_usd")),
        "shares_pp": {k: 100 * (cur["shares"][k] - prev["shares"][k]) for k in SHARES},
        "cache_hit_ratio_pp": 100 * (cur["cache_hit_ratio"] - prev["cache_hit_ratio"]),
        "required_capacity": [
            {
                "ttl_s": c["ttl_s"],
                "peak_tokens": _rel(c.get("peak_tokens"), caps.get(c["ttl_s"], {}).get("peak_tokens")),
            }
            for c in cur.get("required_capacity", [])
        ],
    }


def periods_back(window: str | None, since: str, prev_since: str) -> int | None:
    """How many periods of ``window`` the period starting ``prev_since`` lies before the one
    starting ``since`` (1: the period right before it); None when the window is unknown."""
    if not window:
        return None
    try:
        start = datetime.fromisoformat(since.rstrip("Z"))
        target = datetime.fromisoformat(prev_since.rstrip("Z"))
        n = 0
        while start > target and n < 10_000:
            start = period_for(window, start).start  # the period ending where this one starts
            n += 1
    except (ValueError, ConfigError):
        return None
    return n


def collect_runs(root: Path) -> dict[str, list[dict]]:
    """Every run under ``root`` by profile, oldest period first, each with its ``changes`` against
    the latest earlier period that has data (a period without requests is no baseline), and how
    many periods back that one is (``previous_periods_back``)."""
    by_profile: dict[str, list[dict]] = {}
    for f in sorted(root.glob("*/*/summary.json")):
        if f.parent.name.startswith(".") or f.parent.parent.name.startswith("."):
            continue  # temporary folders of runs in progress
        try:
            run = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a damaged summary should not take the index down
        run["path"] = f.parent.relative_to(root).as_posix()
        by_profile.setdefault(run.get("profile", f.parent.parent.name), []).append(run)
    for runs in by_profile.values():
        runs.sort(key=lambda r: (r["since"], r["until"]))
        prev = None
        for r in runs:
            has_data = bool(r["summary"].get("requests"))
            base = prev if has_data else None
            r["previous"] = base["period"] if base else None
            r["previous_periods_back"] = periods_back(r.get("window"), r["since"], base["since"]) if base else None
            r["changes"] = changes(r["summary"], base["summary"] if base else None)
            if has_data:
                prev = r
    return by_profile


# -- rendering ------------------------------------------------------------------------------------


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _signed(x, fmt: str, unit: str) -> str:
    if x is None:
        return "–"
    arrow = "▲" if x > 0 else "▼" if x < 0 else "="
    return f"{arrow} {x:+{fmt}}{unit}".replace("-", "−")


def _capacity_cell(s: dict) -> str:
    parts = []
    for c in s.get("required_capacity", []):
        size = fmt_tokens(c.get("peak_tokens")) + " tokens"
        if c.get("peak_bytes"):
            size += f" ({fmt_bytes(c['peak_bytes'])})"
        parts.append(f"{fmt_ttl(c['ttl_s'])}: {size}")
    return "<br>".join(_e(p) for p in parts) or "–"


def _capacity_change(ch: dict | None) -> str:
    if not ch or not ch["required_capacity"]:
        return "–"
    return "<br>".join(
        _e(
            f"{fmt_ttl(c['ttl_s'])}: {_signed(None if c['peak_tokens'] is None else 100 * c['peak_tokens'], '.1f', '%')}"
        )
        for c in ch["required_capacity"]
    )


HEADERS = (
    "Period",
    "Compared with",
    "Requests",
    "Δ requests",
    "Tokens",
    "Δ tokens",
    "Cost",
    "Δ cost",
    "Cache read",
    "Δ cache read",
    "Hit ratio",
    "Δ hit ratio",
    "Required capacity (peak)",
    "Δ capacity",
    "Files",
)


def _pct(ch: dict | None, key: str) -> float | None:
    return None if not ch or ch.get(key) is None else 100 * ch[key]


def _compared_with(r: dict) -> str:
    if not r["summary"].get("requests"):
        return "no data in this period"
    if not r.get("previous"):
        return "–"
    back = r.get("previous_periods_back")
    if back is None or back == 1:
        return r["previous"]
    return f"{r['previous']} ({back} periods back: none of the {back - 1} between has data)"


def _row(r: dict) -> str:
    s, ch = r["summary"], r["changes"]
    links = " · ".join(
        f'<a href="{_e(r["path"])}/{_e(f)}">{_e(f.rsplit(".", 1)[-1])}</a>'
        for f in r.get("files", [])
        if f.startswith("report.")
    )
    cells = [
        f'<a href="{_e(r["path"])}/report.html">{_e(r["period"])}</a>'
        if "report.html" in r.get("files", [])
        else _e(r["period"]),
        _e(_compared_with(r)),
        _e(fmt_int(s["requests"])),
        _e(_signed(_pct(ch, "requests"), ".1f", "%")),
        _e(fmt_tokens(s["total_tokens"])),
        _e(_signed(_pct(ch, "total_tokens"), ".1f", "%")),
        _e(fmt_usd(s.get("cost_usd"))),
        _e(_signed(_pct(ch, "cost_usd"), ".1f", "%")),
        _e(fmt_pct(s["shares"]["cache_read"])),
        _e(_signed(ch and ch["shares_pp"]["cache_read"], ".2f", " pp")),
        _e(fmt_pct(s["cache_hit_ratio"])),
        _e(_signed(ch and ch["cache_hit_ratio_pp"], ".2f", " pp")),
        _capacity_cell(s),
        _capacity_change(ch),
        links or "–",
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def render_index(by_profile: dict[str, list[dict]], generated_at: str) -> str:
    body = []
    for name in sorted(by_profile):
        runs = by_profile[name]
        body.append(
            f'<h2>{_e(name)}</h2><p class="meta">{len(runs)} run(s) · window '
            f"{_e(runs[-1].get('window', ''))} · changes are against the profile's previous period with data</p>"
        )
        body.append("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in HEADERS) + "</tr></thead><tbody>")
        body.extend(_row(r) for r in reversed(runs))
        body.append("</tbody></table>")
    if not body:
        body.append("<p>No runs yet.</p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>kvtrace reports</title>
<style>
body {{ font: 15px/1.45 "Liberation Sans", "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1200px; padding: 0 24px; color: #1a1a1a; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; margin-bottom: 24px; }}
th, td {{ border-bottom: 1px solid #d0d0d0; padding: 4px 8px; text-align: right; vertical-align: top; }}
td {{ white-space: nowrap; }}
th:first-child, td:first-child, th:last-child, td:last-child {{ text-align: left; }}
thead th {{ border-bottom: 2px solid #1a1a1a; }}
.meta {{ color: #555; }}
</style></head><body>
<h1>kvtrace reports</h1>
<p class="meta">Index rewritten {_e(generated_at)} (UTC). ▲/▼: change against the previous period of the same
profile that has data (periods without requests are skipped, and the comparison says how far
back it reaches); pp = percentage points.</p>
{"".join(body)}
</body></html>
"""


def write_index(root: Path) -> Path:
    """Rebuild ``root/index.html`` and ``root/index.json`` from the run folders (under a lock, so
    two profiles finishing together do not interleave)."""

    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".index.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        runs = collect_runs(root)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        write_atomic(root / "index.json", json.dumps({"generated_at": now, "profiles": runs}, indent=2).encode())
        return write_atomic(root / "index.html", render_index(runs, now).encode())
