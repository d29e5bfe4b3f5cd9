"""Named SQL queries: one file per query under ``queries/`` (``-- title:`` / ``-- description:`` header)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kvtrace.errors import UnknownQuery


def queries_dir() -> Path:
    """The ``queries/`` folder: the source tree's in a checkout, the packaged copy in a wheel."""
    src = Path(__file__).resolve().parents[2] / "queries"
    if src.is_dir():
        return src
    return Path(str(resources.files("kvtrace") / "_queries"))


@dataclass(frozen=True)
class NamedQuery:
    name: str
    sql: str
    title: str
    description: str


def _parse(name: str, text: str) -> NamedQuery:
    title, desc = name, []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        if body.startswith("title:"):
            title = body[len("title:") :].strip()
        elif body.startswith("description:"):
            desc.append(body[len("description:") :].strip())
        elif desc and body:
            desc.append(body)
    return NamedQuery(name, text, title, " ".join(desc))


@functools.cache
def load_query(name: str) -> NamedQuery:
    """Load ``queries/<name>.sql`` (``schema/NNN_x`` names the migrations)."""
    path = queries_dir() / f"{name}.sql"
    if not path.is_file():
        known = ", ".join(q.name for q in list_queries())
        raise UnknownQuery(f"no query named '{name}'", hint=f"known queries: {known}")
    return _parse(name, path.read_text())


def list_queries() -> list[NamedQuery]:
    """Every named query (not the schema migrations), sorted by name."""
    return [load_query(p.stem) for p in sorted(queries_dir().glob("*.sql"))]
