"""Report periods: which UTC interval a scheduled run covers, and the folder name it gets.

A run at time *T* reports the last *complete* period before *T*, so a run at 00:15 reports
yesterday, and a late or repeated run of the same schedule slot reports the same period (and
finds its folder already there). Periods are UTC unless the profile names a time zone
(``[window] timezone``): then days, weeks and months start at local midnight there, and the
period's bounds are those local instants in UTC (a day may last 23 or 25 hours). Hour windows
are UTC hours in any zone (a clock change would repeat or skip a local hour), named in UTC.

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
from zoneinfo import ZoneInfo

from kvtrace.errors import ConfigError

_LAST = re.compile(r"^\s*last\s+(\d+)\s*([hd])\s*$")
WINDOW_HELP = "use 'last 1d', 'last 7d', 'last 6h', 'calendar day', 'calendar week' or 'calendar month'"


@dataclass(frozen=True)
class Period:
    """A half-open interval [start, end) in naive UTC, and its folder name (local dates)."""

    label: str
    start: datetime
    end: datetime

    def iso(self) -> tuple[str, str]:
        return self.start.isoformat(timespec="seconds") + "Z", self.end.isoformat(timespec="seconds") + "Z"


def check_window(window: str) -> str:
    """Normalize a window name (``Last 7D`` → ``last 7d``) or raise ConfigError."""
    w = " ".join(str(window).lower().split())
    if _LAST.match(w) and int(_LAST.match(w).group(1)) > 0:
        return w
    if w in ("calendar day", "calendar week", "calendar month"):
        return w
    raise ConfigError(f"unknown report window '{window}'", hint=WINDOW_HELP)


def period_for(window: str, at: datetime, tz: str = "UTC") -> Period:
    """The last complete period of ``window`` before ``at`` (naive means UTC), with day, week and
    month boundaries at midnight in the IANA zone ``tz`` (hour windows: UTC hours)."""
    zone = ZoneInfo(tz)
    w = check_window(window)
    utc = at.astimezone(timezone.utc).replace(tzinfo=None) if at.tzinfo else at
    m = _LAST.match(w)
    if m and m.group(2) == "h":  # UTC hours: a clock change can neither repeat nor skip one
        return Period(*_period(w, utc))
    label, start, end = _period(w, utc.replace(tzinfo=timezone.utc).astimezone(zone).replace(tzinfo=None))
    return Period(label, _utc(start, zone), _utc(end, zone))


def _utc(local: datetime, zone) -> datetime:
    """A local wall time in ``zone`` as naive UTC (the earlier instant when the clock repeats)."""
    return local.replace(tzinfo=zone, fold=0).astimezone(timezone.utc).replace(tzinfo=None)


def _period(w: str, at: datetime) -> tuple[str, datetime, datetime]:
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if w == "calendar day":
        w = "last 1d"
    m = _LAST.match(w)
    if m and m.group(2) == "d":
        n = int(m.group(1))
        end = day
        start = end - timedelta(days=n)
        last = end - timedelta(days=1)
        return (start.strftime("%Y-%m-%d") if n == 1 else f"{start:%Y-%m-%d}--{last:%Y-%m-%d}"), start, end
    if m:  # last N hours
        n = int(m.group(1))
        end = at.replace(minute=0, second=0, microsecond=0)
        start = end - timedelta(hours=n)
        last = end - timedelta(hours=1)
        return (start.strftime("%Y-%m-%dT%H") if n == 1 else f"{start:%Y-%m-%dT%H}--{last:%Y-%m-%dT%H}"), start, end
    if w == "calendar week":
        end = day - timedelta(days=day.weekday())  # this week's Monday
        start = end - timedelta(days=7)
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}", start, end
    end = day.replace(day=1)  # calendar month
    start = (end - timedelta(days=1)).replace(day=1)
    return start.strftime("%Y-%m"), start, end
