"""Report windows: ``--since``/``--until`` as ISO dates or spans back from the last record."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from kvtrace.errors import ConfigError

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``1h``, ``2d``, ``1w`` (or a bare number of seconds) -> seconds."""
    t = str(text).strip()
    try:
        return float(t)
    except ValueError:
        pass
    m = _SPAN.match(t)
    if not m:
        raise ConfigError(f"'{text}' is not a duration", hint="use a number with s, m, h, d or w, e.g. 30s, 5m, 1h, 2d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def parse_durations(text: str | list[str] | None) -> list[float]:
    """A comma-separated list (or repeated option values) of durations, sorted, de-duplicated."""
    if not text:
        return []
    items = text if isinstance(text, list) else [text]
    out = {parse_duration(p) for item in items for p in str(item).split(",") if p.strip()}
    return sorted(out)


def parse_instant(text: str | None, last: datetime | None) -> datetime | None:
    """An ISO date/time (UTC unless it says otherwise) or a span back from ``last`` (``7d``)."""
    if text is None:
        return None
    if _SPAN.match(text):
        if last is None:
            return None
        return last - timedelta(seconds=parse_duration(text))
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"'{text}' is not a date or a span",
                          hint="use an ISO date such as 2026-11-02 or 2026-11-02T08:00, or a span such as 7d") from None
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt


def iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"
