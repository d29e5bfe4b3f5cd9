"""``kvtrace ingest``: files, folders, globs or stdin -> the warehouse."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, guarded


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, folders (recursive), globs, or - for stdin. .gz is read too.")],
    db: DbOpt = None,
    format: Annotated[Optional[str], typer.Option("--format", "-f", help="Force a format instead of detecting it: otlp-json, claude-transcript, codex-rollout, gemini-chat, mooncake, bailian.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="A malformed line is fatal (exit 1; nothing of that file is stored).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Re-read files that are unchanged since the last ingest (still never counts a record twice).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, no skipped-line messages.")] = False,
) -> None:
    """Ingest OTLP JSON lines (Claude Code, Codex, Gemini CLI, GenAI spans), Claude Code transcripts,
    Codex rollouts, Gemini CLI chat logs or block-hash traces into the warehouse.

    Ingesting the same input twice adds nothing; each file is one transaction.

    Example: kvtrace ingest otel-logs.jsonl ~/.claude/projects --db team.duckdb
    """
    from kvtrace.ingest import ingest as run
    from kvtrace.store import open_store

    with open_store(db) as store:
        summary = run(store, paths, format=format, strict=strict, force=force, progress=not quiet and not as_json)
    if as_json:
        d = summary.to_dict()
        typer.echo(json.dumps({k: d[k] for k in ("files", "files_skipped", "files_resumed", "requests_added",
                                                 "metric_points_added",
                                                 "block_requests_added", "duplicates_skipped", "lines_rejected",
                                                 "unknown_records", "rejects", "warnings")}, indent=2))
        return
    for line in summary.warnings:
        typer.echo(f"warning: {line}", err=True)
    if not quiet:
        for line in summary.rejects:
            typer.echo(f"skipped {line}", err=True)
        if summary.lines_rejected > len(summary.rejects):
            typer.echo(f"... and {summary.lines_rejected - len(summary.rejects)} more skipped lines", err=True)
    grown = f", {summary.files_resumed} read from where they grew" if summary.files_resumed else ""
    parts = [f"{summary.files} files ({summary.files_skipped} unchanged{grown})",
             f"{summary.requests_added} requests added"]
    if summary.metric_points_added:
        parts.append(f"{summary.metric_points_added} metric points added")
    if summary.block_requests_added:
        parts.append(f"{summary.block_requests_added} block-trace requests added")
    parts.append(f"{summary.duplicates_skipped} duplicates skipped")
    parts.append(f"{summary.lines_rejected} lines rejected")
    if summary.unknown_records:
        parts.append("unused records: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.unknown_records.items())))
    typer.echo("; ".join(parts))


def register(app: typer.Typer) -> None:
    app.command("ingest")(guarded(ingest))
