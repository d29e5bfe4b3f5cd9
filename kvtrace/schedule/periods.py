"""Report periods: which UTC interval a scheduled run covers, and the folder name it gets.

A run at time *T* reports the last *complete* period before *T*, so a run at 00:15 reports
yesterday, and a late or repeated run of the same schedule slot reports the same period (and
finds its folder already there). Periods are UTC.

=================  =====================================  ======================
window             period for a run at 2026-11-03 00:15   folder
=================  =====================================  ======================
``last 1d``        2026-11-02 00:00 → 2026-11-03 00:00    ``2026-11-02``
``last 7d``        2026-10-27 00:00 → 2026-11-03 00:00    ``2026-10-27--2026-11-02``
``last 6h``        2026-11-02 18:00 → 2026-11-03 00:00    ``2026-11-02T18--2026-11-02T23``
``last 1h``        2026-11-02 23:00 → 2026-11-03 00:00    ``2026-11-02T23``
``calendar day``   same as ``last 1d``
``calendar week``  Monday 2026-10-26 → Monday 2026-11-02   ``2026-W44`` (ISO week)
``calendar month`` 2026-10-01 → 2026-11-01                ``2026-10``
=================  =====================================  ======================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kvtrace.errors import ConfigError

_LAST = re.compile(r"^\s*last\s+(\d+)\s*([hd])\s*$")
WINDOW_HELP = "use 'last 1d', 'last 7d', 'last 6h', 'calendar day', 'calendar week' or 'calendar month'"


@dataclass(frozen=True)
class Period:
    """A half-open UTC interval [start, end) and its folder name."""

    label: str
    start: datetime
    end: datetime

    def iso(self) -> tuple[str, str]:
        return self.start.isoformat(timespec="seconds") + "Z", self.end.isoformat(timespec="seconds") + "Z"


def _naive_utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc).replace(tzinfo=None) if at.tzinfo else at


def check_window(window: str) -> str:
    """Normalize a window name (``Last 7D`` → ``last 7d``) or raise ConfigError."""
    w = " ".join(str(window).lower().split())
    if _LAST.match(w) and int(_LAST.match(w).group(1)) > 0:
        return w
    if w in ("calendar day", "calendar week", "calendar month"):
        return w
    raise ConfigError(f"unknown report window '{window}'", hint=WINDOW_HELP)


def period_for(window: str, at: datetime) -> Period:
    """The last complete period of ``window`` before ``at`` (UTC; naive means UTC)."""
    w = check_window(window)
    at = _naive_utc(at)
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if w == "calendar day":
        w = "last 1d"
    m = _LAST.match(w)
    if m:
        n, unit = int(m.group(1)), m.group(2)
        if unit == "d":
            end = day
            start = end - timedelta(days=n)
            last = end - timedelta(days=1)
            label = start.strftime("%Y-%m-%d") if n == 1 else f"{start:%Y-%m-%d}--{last:%Y-%m-%d}"
        else:
            end = at.replace(minute=0, second=0, microsecond=0)
            start = end - timedelta(hours=n)
            last = end - timedelta(hours=1)
            label = start.strftime("%Y-%m-%dT%H") if n == 1 else f"{start:%Y-%m-%dT%H}--{last:%Y-%m-%dT%H}"
        return Period(label, start, end)
    if w == "calendar week":
        end = day - timedelta(days=day.weekday())          # this week's Monday
        start = end - timedelta(days=7)
        year, week, _ = start.isocalendar()
        return Period(f"{year}-W{week:02d}", start, end)
    end = day.replace(day=1)                              # calendar month
    start = (end - timedelta(days=1)).replace(day=1)
    return Period(start.strftime("%Y-%m"), start, end)
