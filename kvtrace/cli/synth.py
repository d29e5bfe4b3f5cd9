"""``kvtrace synth``: generate a seeded synthetic Claude Code workload (OTLP JSON lines, transcripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import guarded
from kvtrace.errors import ConfigError
from kvtrace.synth import config as cfgmod
from kvtrace.synth import generate


def synth(
    out: Annotated[
        Optional[Path], typer.Option("--out", "-o", help="Output folder (otlp/, claude/projects/, synth-run.md).")
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Random seed: the same seed and options give the same bytes.")
    ] = 0,
    preset: Annotated[
        str,
        typer.Option(
            "--preset",
            help="seed-study (2.5 sessions/min around the clock) or sample-week (a small team's working week).",
        ),
    ] = "seed-study",
    days: Annotated[
        Optional[float], typer.Option("--days", help="Days of session arrivals (default: the preset's, 7).")
    ] = None,
    start: Annotated[
        Optional[str], typer.Option("--start", help="Simulated start, ISO 8601 UTC (default 2026-03-02T00:00:00Z).")
    ] = None,
    cache_ttl: Annotated[
        str, typer.Option("--cache-ttl", help="Prompt-cache idle TTL the simulated API uses: 5m or 1h.")
    ] = "5m",
    format: Annotated[
        str, typer.Option("--format", "-f", help="Comma list of outputs: otlp, transcripts.")
    ] = "otlp,transcripts",
    rate: Annotated[
        Optional[float], typer.Option("--rate", help="Session arrivals per minute while active (overrides the preset).")
    ] = None,
    users: Annotated[
        Optional[int], typer.Option("--users", help="Size of the user pool (overrides the preset).")
    ] = None,
    set_: Annotated[
        Optional[list[str]],
        typer.Option("--set", help="Override any model parameter: name=value (JSON value), repeatable; see --params."),
    ] = None,
    endpoint: Annotated[
        Optional[str],
        typer.Option(
            "--endpoint",
            help="Send OTLP live to this OTLP/HTTP base URL (e.g. http://127.0.0.1:4318) instead of writing otlp/ (transcripts only with --out).",
        ),
    ] = None,
    gzip: Annotated[bool, typer.Option("--gzip", help="Write .jsonl.gz files (deterministic headers).")] = False,
    params: Annotated[
        bool, typer.Option("--params", help="List every model parameter with its default and exit.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Generate a synthetic agentic coding workload as Claude Code emits it.

    Sessions arrive as a Poisson process; each request appends tool results or file reads to a
    growing context, compacts at 64K, some sessions pause ~15 min and resume, some turns spawn
    subagents. Cache reads and writes follow a hosted API's prompt cache with an idle TTL. Output:
    OTLP JSON lines (otlp/logs.jsonl, otlp/metrics.jsonl) and a ~/.claude/projects tree.

    Example: kvtrace synth --preset sample-week --seed 7 --out sample_traces/ --gzip
    """

    if params:
        for name, default, help in cfgmod.describe():
            typer.echo(f"{name:28} {default:42} {help}")
        return
    kwargs: dict = {"seed": seed, "cache_ttl_s": cfgmod.parse_ttl(cache_ttl)}
    for key, value in (("days", days), ("start", start), ("arrival_rate_per_min", rate), ("users", users)):
        if value is not None:
            kwargs[key] = value
    for assignment in set_ or []:
        cfgmod.set_field(kwargs, assignment)
    try:
        config = cfgmod.preset(preset, **kwargs)
    except TypeError as e:
        raise ConfigError(f"bad synth parameter: {e}", hint="see kvtrace synth --params") from None
    formats = tuple(f.strip() for f in format.split(",") if f.strip())
    if endpoint:
        # OTLP goes to the endpoint; transcripts are files, written only when there is a folder.
        formats = tuple(f for f in formats if f != "otlp" and out is not None)
    if out is None and not endpoint:
        raise ConfigError("no output folder", hint="pass --out DIR (or --endpoint URL to send OTLP live)")

    with _bar(not quiet and not as_json) as progress:
        result = generate(config, out, formats=formats, endpoint=endpoint, gzip=gzip, progress=progress)
    summary = result.summary()
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    mix = summary["token_mix"]
    typer.echo(
        f"{summary['sessions']} sessions, {summary['requests']} requests, "
        f"${summary['cost_usd']:,.2f} at list prices, in {summary['elapsed_s']} s"
    )
    typer.echo("token mix: " + ", ".join(f"{k.removesuffix('_tokens')} {v * 100:.2f}%" for k, v in mix.items()))
    for kind, path in summary["files"].items():
        typer.echo(f"wrote {kind}: {path}")
    if endpoint:
        typer.echo(f"sent to {endpoint}: " + ", ".join(f"{k}={v}" for k, v in summary["counts"].items()))


class _bar:
    """A rich progress bar over simulated time (on stderr), or nothing."""

    def __init__(self, enabled: bool):
        self.enabled, self.progress, self.task = enabled, None, None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("[bold]simulating"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.progress.__enter__()
        self.task = self.progress.add_task("synth", total=1.0)
        return lambda frac: self.progress.update(self.task, completed=frac)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)
        return False


def register(app: typer.Typer) -> None:
    app.command("synth")(guarded(synth))
