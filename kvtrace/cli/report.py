"""``kvtrace report`` (being built: token mix first)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass
