"""``kvtrace schedule``: run profiles on their cron expressions until stopped.

Each profile's latest due slot (the last cron time at or before now, read in the profile's
``[window] timezone``, UTC by default) is run once. At start-up
that is the catch-up: if the period of the most recent slot has no folder yet (the machine was off,
the service was down), it runs now, once; older missed periods are left alone (run them with
``kvtrace run PROFILE --at``). After a long sleep (a suspended laptop) several slots may have
passed; again only the latest runs. Every run is passed the slot time, not the wall-clock time, so
a late run reports the period its slot was for. A failing run is reported and the loop goes on.
A period without requests gets no folder (unless the profile asks for empty reports), so the
next start-up checks it again: telemetry that arrived late is then reported.

The clock and the sleep are parameters, so tests drive the loop without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from kvtrace.errors import ConfigError
from kvtrace.schedule.profile import Profile
from kvtrace.schedule.run import period_folder, run_profile
from kvtrace.schedule.periods import period_for


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _in_zone(now: datetime, tz: str) -> datetime:
    return now.replace(tzinfo=timezone.utc).astimezone(ZoneInfo(tz))


def _naive_utc(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


def latest_slot(cron: str, now: datetime, tz: str = "UTC") -> datetime:
    """The last cron time at or before ``now`` (naive UTC), the cron read as wall-clock time in
    the IANA zone ``tz``; returned as naive UTC."""
    from croniter import croniter

    # croniter's get_prev is strictly before its base; nudge the base so a slot equal to now counts.
    return _naive_utc(croniter(cron, _in_zone(now + timedelta(seconds=1), tz)).get_prev(datetime))


def next_slot(cron: str, now: datetime, tz: str = "UTC") -> datetime:
    from croniter import croniter

    return _naive_utc(croniter(cron, _in_zone(now, tz)).get_next(datetime))


def schedule(
    profiles: list[Profile],
    *,
    run: Callable | None = None,
    now: Callable[[], datetime] = utcnow,
    sleep: Callable[[float], None] = time.sleep,
    once: bool = False,
    max_runs: int | None = None,
    on_event: Callable[[str, Profile, datetime, object], None] | None = None,
    **run_kwargs,
) -> int:
    """Run ``profiles`` on their cron expressions.

    Args:
        profiles: loaded profiles; each needs ``[schedule] cron``.
        run: the runner, ``run(profile, at=slot, **run_kwargs)``; default :func:`run_profile`.
        now: the clock (naive UTC).
        sleep: waits a number of seconds.
        once: do what is due now (the catch-up), then return instead of waiting.
        max_runs: return after this many runs (tests, or a bounded service).
        on_event: called with ("ran" | "failed" | "skipped", profile, slot, result or error).
        run_kwargs: passed to every run (``warehouse=``, ``output_root=``).

    Returns:
        The number of runs started.
    """

    run = run or run_profile
    for p in profiles:
        if not p.cron:
            raise ConfigError(f"profile '{p.name}' has no [schedule] cron", hint='add e.g. cron = "15 0 * * *"')
    done: dict[str, datetime | None] = {p.name: None for p in profiles}
    ran: dict[str, str] = {}  # the period each profile last ran for
    emit = on_event or (lambda *a: None)
    started = 0
    while True:
        t = now()
        for p in profiles:
            slot = latest_slot(p.cron, t, p.timezone)
            if done[p.name] is not None and slot <= done[p.name]:
                continue
            period = period_for(p.window, slot, p.timezone).label
            if ran.get(p.name) == period:  # a local time the clock change repeats: its period is done
                done[p.name] = slot
                continue
            if done[p.name] is None:
                folder = period_folder(p, period_for(p.window, slot, p.timezone), run_kwargs.get("output_root"))
                if folder.exists():  # start-up: this slot's period was already reported
                    done[p.name] = slot
                    emit("skipped", p, slot, folder)
                    continue
            done[p.name] = slot  # mark first: a failing run is not retried every second
            ran[p.name] = period
            started += 1
            try:
                emit("ran", p, slot, run(p, at=slot, **run_kwargs))
            except Exception as e:  # noqa: BLE001 - one bad period must not stop the service
                emit("failed", p, slot, e)
            if max_runs is not None and started >= max_runs:
                return started
        if once:
            return started
        wake = min(next_slot(p.cron, t, p.timezone) for p in profiles)
        sleep(max(0.0, (wake - now()).total_seconds()))
