"""``kvtrace ingest``: files, folders, globs or stdin -> the warehouse."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, guarded
from kvtrace.errors import Interrupted
from kvtrace.launch import interrupted
from kvtrace.units import fmt_int


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
    from kvtrace.ingest import IngestSummary, ingest as run
    from kvtrace.store import open_store

    summary = IngestSummary()
    try:
        with open_store(db) as store:
            run(store, paths, format=format, strict=strict, force=force, progress=not quiet and not as_json,
                summary=summary)
    except BaseException as e:
        if not interrupted(e):
            raise
        raise Interrupted(interrupted_line(summary)) from e
    if as_json:
        d = summary.to_dict()
        typer.echo(json.dumps({k: d[k] for k in ("files", "files_skipped", "files_resumed", "requests_added",
                                                 "metric_points_added",
                                                 "block_requests_added", "duplicates_skipped", "lines_rejected",
                                                 "unknown_records", "rejects")}, indent=2))
        return
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


def interrupted_line(summary) -> str:
    """What an interrupted ingest kept and what it rolled back, in one line."""
    kept = (f"kept {fmt_int(summary.files_stored)} of {fmt_int(summary.files)} files "
            f"({fmt_int(summary.requests_added)} requests added)") if summary.files else "kept nothing"
    if summary.files_skipped:
        kept += f", {fmt_int(summary.files_skipped)} unchanged"
    pending = summary.files_pending
    if pending:
        more = f" and {len(pending) - 1} more files of its batch" if len(pending) > 1 else ""
        rolled = f"rolled back {pending[0]}{more} (nothing of it stored)"
    else:
        rolled = "nothing half-written"
    left = summary.files - summary.files_stored - summary.files_skipped
    again = "; run the same command again to ingest the rest" if left or not summary.files else ""
    return f"{kept}; {rolled}{again}"


def register(app: typer.Typer) -> None:
    app.command("ingest")(guarded(ingest))
