"""``kvtrace ingest``: files, folders, globs or stdin -> the warehouse."""

from __future__ import annotations

import json
import os
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, InputFormatOpt, guarded
from kvtrace.errors import ConfigError, Interrupted, KvtraceError, WriteFailed
from kvtrace.ingest.formats import BLOCK_FORMATS, FORMATS
from kvtrace.launch import interrupted
from kvtrace.units import fmt_int


def ingest(
    paths: Annotated[
        list[str], typer.Argument(help="Files, folders (recursive), globs, or - for stdin. .gz is read too.")
    ],
    db: DbOpt = None,
    input_format: InputFormatOpt = None,
    block_size: Annotated[
        Optional[int],
        typer.Option(
            "--block-size",
            min=1,
            help="Tokens per block of block-hash traces that do not say (Mooncake's have none; kvtrace export writes it on every line, and a file's own size must agree). Default: the format's (Mooncake 512, Bailian 16), with a warning. Applies to the files read: an unchanged file is not read again without --force.",
            show_default=False,
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="A malformed line is fatal (exit 1; nothing of that file is stored).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Re-read files that are unchanged since the last ingest (still never counts a record twice).",
        ),
    ] = False,
    format: Annotated[
        Optional[str],
        typer.Option(
            "--format", "-f", help="Output format of the summary: text (default) or json.", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, no skipped-line messages.")] = False,
) -> None:
    """Ingest OTLP JSON lines (Claude Code, Codex, Gemini CLI, GenAI spans), Claude Code transcripts,
    Codex rollouts, Gemini CLI chat logs or block-hash traces into the warehouse.

    Ingesting the same input twice adds nothing; each file is one transaction.

    Example: kvtrace ingest otel-logs.jsonl ~/.claude/projects --db team.duckdb

    Example: kvtrace ingest conversation_trace.jsonl --input-format mooncake --block-size 64 --format json
    """
    from kvtrace.ingest import IngestSummary, ingest as run
    from kvtrace.store import default_db_path, open_store

    as_json = output_format(format, as_json)
    summary = IngestSummary()
    target = db if db is not None else default_db_path()
    fresh = not os.path.lexists(target)
    try:
        with open_store(db) as store:
            run(
                store,
                paths,
                format=input_format,
                block_size=block_size,
                strict=strict,
                force=force,
                progress=not quiet and not as_json,
                summary=summary,
            )
    except BaseException as e:
        if fresh and not summary.files_stored:
            _remove_warehouse(target)  # a failed first ingest leaves no empty warehouse behind
        if isinstance(e, WriteFailed) and not interrupted():
            raise WriteFailed(f"{e.args[0]}: {interrupted_line(summary)}", hint=e.hint) from None
        if not interrupted(e):
            raise
        raise Interrupted(interrupted_line(summary)) from e
    if block_size is not None and summary.files_stored and not set(summary.formats) & set(BLOCK_FORMATS):
        summary.warnings.append(
            f"--block-size {block_size} applies to block-hash traces ({', '.join(BLOCK_FORMATS)}); none was read"
        )
    if fresh and summary.yielded_nothing and not summary.files_stored:
        _remove_warehouse(target)
    if as_json:
        d = summary.to_dict()
        typer.echo(
            json.dumps(
                {
                    k: d[k]
                    for k in (
                        "files",
                        "files_skipped",
                        "files_resumed",
                        "requests_added",
                        "metric_points_added",
                        "block_requests_added",
                        "duplicates_skipped",
                        "requests_folded",
                        "lines_rejected",
                        "unknown_records",
                        "rejects",
                        "skipped",
                        "yielded_nothing",
                        "warnings",
                    )
                },
                indent=2,
            )
        )
    else:
        for line in summary.warnings:
            typer.echo(f"warning: {line}", err=True)
        if not quiet:
            for line in summary.rejects:
                typer.echo(f"skipped {line}", err=True)
            if summary.lines_rejected > len(summary.rejects):
                typer.echo(f"... and {summary.lines_rejected - len(summary.rejects)} more skipped lines", err=True)
            for line in summary.skipped[:MAX_LISTED]:
                typer.echo(f"skipped {line}", err=True)
            if len(summary.skipped) > MAX_LISTED:
                typer.echo(
                    f"... and {len(summary.skipped) - MAX_LISTED} more skipped files (--json lists them)", err=True
                )
        typer.echo(summary_line(summary))
    if summary.yielded_nothing:
        first, more = summary.yielded_nothing[0], len(summary.yielded_nothing) - 1
        for line in summary.yielded_nothing[1:MAX_LISTED]:
            typer.echo(f"nothing from {line}", err=True)
        raise KvtraceError(first + (f" (and {more} more inputs that yielded nothing)" if more else ""))


def output_format(format: str | None, as_json: bool) -> bool:
    """``--format`` (and its alias ``--json``) as "print JSON"; an input format name given to
    ``--format`` (its meaning before ``--input-format``) is refused with the new spelling."""
    if format in FORMATS:
        raise ConfigError(f"--format is the output format; to force the input format use --input-format {format}")
    if format not in (None, "text", "json"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose text or json")
    if as_json and format == "text":
        raise ConfigError("--json is --format json, not --format text", hint="give one of them")
    return as_json or format == "json"


MAX_LISTED = 20
TOP_KINDS = 3


def summary_line(summary) -> str:
    """The one line that closes an ingest."""
    unknown = dict(summary.unknown_records)
    unrecognized = unknown.pop("file:unrecognized", 0)
    extra = [f"{summary.files_resumed} read from where they grew"] if summary.files_resumed else []
    if summary.skipped:
        extra.append(f"{len(summary.skipped)} skipped")
    if unrecognized:
        extra.append(f"{unrecognized} not telemetry")
    parts = [
        f"{summary.files} files ({summary.files_skipped} unchanged{''.join(', ' + x for x in extra)})",
        f"{summary.requests_added} requests added",
    ]
    if summary.metric_points_added:
        parts.append(f"{summary.metric_points_added} metric points added")
    if summary.block_requests_added:
        parts.append(f"{summary.block_requests_added} block-trace requests added")
    parts.append(f"{summary.duplicates_skipped} duplicates skipped")
    if summary.requests_folded:
        parts.append(f"{summary.requests_folded} stored copies of another request merged into it")
    parts.append(f"{summary.lines_rejected} lines rejected")
    if unknown:
        top = sorted(unknown.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{k}={v}" for k, v in top[:TOP_KINDS])
        rest = f", {len(top) - TOP_KINDS} more kinds (--json lists them)" if len(top) > TOP_KINDS else ""
        parts.append(f"{sum(unknown.values())} unused records ({shown}{rest})")
    return "; ".join(parts)


def _remove_warehouse(path) -> None:
    for p in (str(path), f"{path}.wal"):
        try:
            os.remove(p)
        except OSError:
            pass


def interrupted_line(summary) -> str:
    """What an interrupted (or failed) ingest kept and what it rolled back, in one line."""
    kept = (
        (
            f"kept {fmt_int(summary.files_stored)} of {fmt_int(summary.files)} files "
            f"({fmt_int(summary.requests_added)} requests added)"
        )
        if summary.files
        else "kept nothing"
    )
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
