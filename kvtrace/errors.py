"""kvtrace's one error hierarchy. Only ``kvtrace.cli`` turns these into ``Error: ...`` and exit 1
(``Interrupted: ...`` and exit 130 for Ctrl-C)."""

from __future__ import annotations

import sys


class KvtraceError(Exception):
    """Base class of every error kvtrace raises on purpose."""

    hint: str | None = None
    exit_code = 1  # the process exit code when the CLI reports it

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{msg} ({self.hint})" if self.hint else msg


class BadTraceInput(KvtraceError):
    """An input file (or one line of it) that cannot be read as the format it claims."""

    def __init__(self, path: str, line: int | None, reason: str, *, field: str | None = None, hint: str | None = None):
        self.path, self.line, self.reason, self.field = str(path), line, reason, field
        where = f"{path}:{line}" if line is not None else str(path)
        what = f"field '{field}': {reason}" if field else reason
        super().__init__(f"{where}: {what}", hint=hint)


class UnknownFormat(KvtraceError):
    """The input format could not be detected, or an unknown --input-format was named."""


class UnknownQuery(KvtraceError):
    """A named query that does not exist in ``queries/``."""


class SchemaError(KvtraceError):
    """The warehouse schema is missing, newer than this kvtrace, or inconsistent."""


class WarehouseBusy(SchemaError):
    """Another process holds the warehouse for writing (a lock, not a problem of the file)."""


class ConfigError(KvtraceError):
    """A bad option value, profile, tier list or model name."""


class ReportExists(KvtraceError):
    """A scheduled run's period folder already exists (use --force to replace it)."""


class NoData(KvtraceError):
    """A window (or a whole warehouse) without a single request, where the caller asked for data
    (``--strict``): an empty answer is not an answer of zero."""


class Interrupted(KvtraceError):
    """Ctrl-C: the message says what was kept and what was rolled back; the exit code is 130."""

    exit_code = 130


class WriteFailed(KvtraceError):
    """The warehouse file could not be written (a full disk, a file size limit)."""


def exit_code(code) -> int:
    """A ``SystemExit`` code as the process exit code, as the interpreter maps it: None is 0, an
    int stays, anything else is printed to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
