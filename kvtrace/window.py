"""Report windows: ``--since``/``--until`` as ISO dates or spans back from the last record."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kvtrace.errors import ConfigError
from kvtrace.units import is_span, parse_duration


def parse_instant(text: str | None, last: datetime | None, tz: str = "UTC") -> datetime | None:
    """An ISO date/time (in the IANA zone ``tz`` unless it says otherwise) or a span back from
    ``last`` (``7d``); returned as naive UTC."""
    if text is None:
        return None
    if is_span(text):
        if last is None:
            return None
        if isinstance(last, str):  # a stored time beyond year 9999 (DuckDB hands it over as text)
            last = datetime.max
        return last - timedelta(seconds=parse_duration(text))
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"'{text}' is not a date or a span",
            hint="use an ISO date such as 2026-11-02 or 2026-11-02T08:00, or a span such as 7d",
        ) from None
    if dt.tzinfo is None and tz != "UTC":
        from zoneinfo import ZoneInfo

        dt = dt.replace(tzinfo=ZoneInfo(tz))
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt


def iso(dt: datetime | str | None) -> str | None:
    """A time as ISO 8601 UTC; a stored time Python cannot hold (beyond year 9999: DuckDB hands it
    over as text) as DuckDB wrote it."""
    if isinstance(dt, str):
        return dt.replace(" ", "T") + ("" if dt.endswith("Z") else "Z")
    return None if dt is None else dt.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"
