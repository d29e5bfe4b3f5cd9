"""Number formatting shared by every rendering (terminal, Markdown, HTML, charts, index)."""

from __future__ import annotations


def fmt_int(n: int | float | None) -> str:
    return "–" if n is None else f"{int(round(n)):,}"


def fmt_pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def fmt_duration(s: float | None) -> str:
    """Seconds as the TTL spellings people type: 30s, 5m, 1h, 2d (``none`` for no TTL)."""
    if s is None:
        return "none"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{int(s // size)}{unit}"
    return f"{s:g}s"


def fmt_tokens(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
