"""Options shared by several commands (one definition, one help text)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

DbOpt = Annotated[Optional[Path], typer.Option(
    "--db", envvar="KVTRACE_DB", help="Warehouse file (default ./kvtrace.duckdb; env KVTRACE_DB).",
    show_default=False)]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Write to this file instead of stdout.")]
SinceOpt = Annotated[Optional[str], typer.Option(
    "--since", help="Start of the window (ISO date/time, UTC, inclusive), or a span back from the last record: 7d, 24h.")]
UntilOpt = Annotated[Optional[str], typer.Option("--until", help="End of the window (ISO date/time, UTC, exclusive).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="KV geometry for bytes: a catalog model (kvtrace size --list) or a config.json path, with its "
                    "KV cache dtype as a suffix or through --kv-dtype: MiniMax-M2.7:fp8 (default bf16).")]
KvDtypeOpt = Annotated[Optional[str], typer.Option(
    "--kv-dtype", help="KV cache dtype of --model: bf16 (default) or fp8; the same as --model NAME:fp8.",
    show_default=False)]


def model_option(model: str | None, kv_dtype: str | None) -> str | None:
    """``--model`` and ``--kv-dtype`` as one model spec (``NAME`` or ``NAME:DTYPE``), checked
    against the catalog now (an unknown model fails before any work)."""
    from kvtrace.errors import ConfigError
    from kvtrace.replay.catalog import model_spec, resolve_model

    if model is None:
        if kv_dtype is not None:
            raise ConfigError("--kv-dtype needs --model", hint="e.g. --model MiniMax-M2.7 --kv-dtype fp8")
        return None
    spec = model_spec(model, kv_dtype)
    resolve_model(spec)
    return spec


def guarded(fn):
    """Wrap a command so library errors print one ``Error: ...`` line and exit 1 (CliRunner too)."""
    import functools

    from kvtrace.errors import KvtraceError

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KvtraceError as e:
            typer.echo(f"Error: {e}", err=True)
            raise typer.Exit(1) from e

    return wrapper
