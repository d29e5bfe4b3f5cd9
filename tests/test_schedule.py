"""Report profiles, periods, the index of runs and the cron loop (with an injected clock)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.errors import ConfigError
from kvtrace.schedule.index import changes, collect_runs, render_index, summarize
from kvtrace.schedule.periods import period_for
from kvtrace.schedule.profile import load_profile, profile_from_dict, profiles_dir
from kvtrace.schedule.scheduler import latest_slot, schedule

AT = datetime(2026, 11, 3, 0, 15)


# -- periods --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "window, label, start, end",
    [
        ("last 1d", "2026-11-02", datetime(2026, 11, 2), datetime(2026, 11, 3)),
        ("calendar day", "2026-11-02", datetime(2026, 11, 2), datetime(2026, 11, 3)),
        ("last 7d", "2026-10-27--2026-11-02", datetime(2026, 10, 27), datetime(2026, 11, 3)),
        ("last 6h", "2026-11-02T18--2026-11-02T23", datetime(2026, 11, 2, 18), datetime(2026, 11, 3)),
        ("last 1h", "2026-11-02T23", datetime(2026, 11, 2, 23), datetime(2026, 11, 3)),
        ("calendar week", "2026-W44", datetime(2026, 10, 26), datetime(2026, 11, 2)),
        ("calendar month", "2026-10", datetime(2026, 10, 1), datetime(2026, 11, 1)),
        ("Last  7D", "2026-10-27--2026-11-02", datetime(2026, 10, 27), datetime(2026, 11, 3)),
    ],
)
def test_period_for(window, label, start, end):
    p = period_for(window, AT)
    assert (p.label, p.start, p.end) == (label, start, end)
    assert p.iso() == (start.isoformat() + "Z", end.isoformat() + "Z")


@pytest.mark.parametrize("bad", ["yesterday", "last 0d", "last 3w", "calendar year", ""])
def test_bad_window(bad):
    with pytest.raises(ConfigError, match="window"):
        period_for(bad, AT)


@settings(max_examples=200, deadline=None)
@given(
    at=st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2099, 1, 1)),
    window=st.sampled_from(["last 1d", "last 7d", "last 1h", "last 6h", "calendar week", "calendar month"]),
)
def test_periods_are_complete_and_follow_each_other(at, window):
    p = period_for(window, at)
    assert p.start < p.end <= at  # complete before the run
    step = timedelta(days=31) if window == "calendar month" else p.end - p.start
    nxt = period_for(window, p.end + step)  # a run one period later
    assert nxt.start == p.end and nxt.label != p.label  # the next period starts where this one ended
    assert period_for(window, p.end) == p  # every run time up to the next end gives p


@pytest.mark.parametrize(
    "window, at, label, start, end",
    [
        # 00:15 UTC is 01:15 in Berlin (CET): yesterday there ended at 23:00 UTC
        ("calendar day", AT, "2026-11-02", datetime(2026, 11, 1, 23), datetime(2026, 11, 2, 23)),
        # New York's day of the clock change (1 Nov 2026): 25 hours
        ("last 1d", datetime(2026, 11, 2, 12), "2026-11-01", datetime(2026, 11, 1, 4), datetime(2026, 11, 2, 5)),
        ("calendar week", AT, "2026-W44", datetime(2026, 10, 25, 23), datetime(2026, 11, 1, 23)),
        ("calendar month", AT, "2026-10", datetime(2026, 9, 30, 22), datetime(2026, 10, 31, 23)),
        # hours are UTC hours, named in UTC, in any zone
        ("last 1h", AT, "2026-11-02T23", datetime(2026, 11, 2, 23), datetime(2026, 11, 3)),
        ("last 6h", AT, "2026-11-02T18--2026-11-02T23", datetime(2026, 11, 2, 18), datetime(2026, 11, 3)),
    ],
)
def test_periods_start_at_local_midnight_in_the_profile_zone(window, at, label, start, end):
    tz = "America/New_York" if at != AT else "Europe/Berlin"
    p = period_for(window, at, tz)
    assert (p.label, p.start, p.end) == (label, start, end)


@settings(max_examples=150, deadline=None)
@given(
    at=st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2099, 1, 1)),
    window=st.sampled_from(["last 1d", "last 7d", "last 1h", "last 6h", "calendar week", "calendar month"]),
    tz=st.sampled_from(["Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]),
)
def test_local_periods_are_complete_and_follow_each_other(at, window, tz):
    p = period_for(window, at, tz)
    assert p.start < p.end <= at
    # a run one period later (local days last 23 to 25 hours, months 28 to 31 days)
    later = {
        "last 1d": timedelta(hours=26),
        "last 7d": timedelta(days=7, hours=2),
        "last 1h": timedelta(hours=1),
        "last 6h": timedelta(hours=6),
        "calendar week": timedelta(days=7, hours=2),
        "calendar month": timedelta(days=31, hours=2),
    }[window]
    nxt = period_for(window, p.end + later, tz)
    assert nxt.start == p.end and nxt.label != p.label
    assert period_for(window, p.end, tz) == p


@pytest.mark.parametrize(
    "tz, at",
    [("America/New_York", datetime(2026, 11, 1, 6, 10)), ("Australia/Lord_Howe", datetime(2026, 4, 4, 14, 10))],
)
def test_hour_windows_neither_repeat_nor_skip_an_hour_when_the_clock_changes(tz, at):
    hours = [period_for("last 1h", at + timedelta(minutes=20 * k), tz) for k in range(12)]
    distinct = list(dict.fromkeys(hours))
    assert all(b.start == a.end for a, b in zip(distinct, distinct[1:]))
    assert len({p.label for p in distinct}) == len(distinct)


def test_a_cron_slot_repeated_by_the_clock_change_runs_its_period_once(tmp_path):
    """01:30 in New York happens twice on 1 Nov 2026: the second slot's period is the first's."""
    p = profile_from_dict(
        {
            "window": {"period": "last 1d", "timezone": "America/New_York"},
            "schedule": {"cron": "30 1 * * *"},
            "output": {"root": str(tmp_path)},
        },
        name="ny",
    )
    clock = [datetime(2026, 11, 1, 5, 0)]
    runs, events = [], []

    def fake_run(profile, at, **kw):
        runs.append(at)
        return at

    def sleep(seconds):
        clock[0] += timedelta(seconds=max(seconds, 1))

    schedule(
        [p],
        run=fake_run,
        now=lambda: clock[0],
        sleep=sleep,
        max_runs=3,
        on_event=lambda kind, prof, slot, res: events.append((kind, slot)),
    )
    assert [period_for(p.window, at, p.timezone).label for at in runs] == ["2026-10-30", "2026-10-31", "2026-11-01"]


def test_cron_is_read_in_the_profile_zone():
    # 00:15 every day in Berlin is 23:15 UTC the day before in winter, 22:15 in summer
    assert latest_slot("15 0 * * *", AT, "Europe/Berlin") == datetime(2026, 11, 2, 23, 15)
    assert latest_slot("15 0 * * *", datetime(2026, 7, 1, 12), "Europe/Berlin") == datetime(2026, 6, 30, 22, 15)
    assert latest_slot("15 0 * * *", AT, "UTC") == AT


# -- profiles -------------------------------------------------------------------------------------


def test_example_profiles_load():
    names = sorted(q.stem for q in profiles_dir().glob("*.toml"))
    assert {"daily", "weekly"} <= set(names)
    daily, weekly = load_profile("daily"), load_profile("weekly")
    assert daily.window == "last 1d" and weekly.window == "calendar week"
    assert daily.cron and weekly.cron and "html" in daily.formats and "png" in weekly.formats
    assert daily.ttls and weekly.ttls


def test_profile_errors_name_the_file_and_key(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('[window]\nperiod = "last 1d"\nperiods = 3\n')
    with pytest.raises(ConfigError, match=r"p\.toml: unknown key 'periods' in \[window\]"):
        load_profile(f)
    f.write_text('[schedule]\ncron = "every day"\n')
    with pytest.raises(ConfigError, match="not a cron expression"):
        load_profile(f)
    f.write_text('[output]\nformats = ["html", "pdf"]\n')
    with pytest.raises(ConfigError, match="unknown pdf"):
        load_profile(f)
    f.write_text('[window]\ntimezone = "Mars/Olympus"\n')
    with pytest.raises(ConfigError, match=r"p\.toml: \[window\] timezone: unknown zone 'Mars/Olympus'"):
        load_profile(f)
    f.write_text("title = 'x\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_profile(f)
    with pytest.raises(ConfigError, match="daily"):  # the hint lists the known profiles
        load_profile("no-such-profile")


def test_profile_paths_expand(monkeypatch, tmp_path):
    monkeypatch.setenv("KV_TEST_ROOT", str(tmp_path))
    p = profile_from_dict(
        {"inputs": {"warehouse": "$KV_TEST_ROOT/w.duckdb", "files": "~/x"}, "output": {"root": "$KV_TEST_ROOT/out"}},
        name="n",
    )
    assert p.warehouse == tmp_path / "w.duckdb" and p.output_root == tmp_path / "out"
    assert p.files == [Path.home() / "x"]


# -- index ----------------------------------------------------------------------------------------


def _summary(requests, read_share, hit, peak):
    return {
        "requests": requests,
        "sessions": 1,
        "total_tokens": requests * 100,
        "shares": {"cache_read": read_share, "cache_creation": 1 - read_share, "output": 0.0, "input_uncached": 0.0},
        "cache_hit_ratio": hit,
        "required_capacity": [
            {"ttl_s": 300.0, "peak_tokens": peak, "p99_tokens": peak, "peak_bytes": None, "hit_ratio_tokens": hit}
        ],
    }


def test_changes_are_relative_for_counts_and_points_for_shares():
    ch = changes(_summary(120, 0.95, 0.90, 3000), _summary(100, 0.90, 0.92, 2000))
    assert ch["requests"] == pytest.approx(0.2) and ch["total_tokens"] == pytest.approx(0.2)
    assert ch["shares_pp"]["cache_read"] == pytest.approx(5.0)
    assert ch["cache_hit_ratio_pp"] == pytest.approx(-2.0)
    assert ch["required_capacity"][0]["peak_tokens"] == pytest.approx(0.5)
    assert changes(_summary(1, 1, 1, 1), None) is None
    assert changes(_summary(5, 1, 1, 1), _summary(0, 1, 1, 0))["requests"] is None  # no division by zero


def test_summarize_reads_the_report_dict():
    d = {
        "requests": 3,
        "sessions": 2,
        "token_mix": {
            "total": 100,
            "cache_hit_ratio": 0.9,
            "shares": {
                "cache_read": 0.9,
                "cache_write_5m": 0.03,
                "cache_write_1h": 0.02,
                "cache_write_unknown": 0.01,
                "output": 0.03,
                "input_uncached": 0.01,
            },
        },
        "ttl": [
            {
                "ttl_s": 3600.0,
                "hit_ratio_tokens": 0.8,
                "working_set": {"peak_tokens": 10, "p99_tokens": 9, "peak_bytes": 1e6, "mean_tokens": 5},
            }
        ],
    }
    s = summarize(d)
    assert s["shares"]["cache_creation"] == pytest.approx(0.06)
    assert s["required_capacity"] == [
        {"ttl_s": 3600.0, "hit_ratio_tokens": 0.8, "peak_tokens": 10, "p99_tokens": 9, "peak_bytes": 1e6}
    ]


def _write_run(root: Path, profile: str, label: str, since: str, summary: dict) -> None:
    folder = root / profile / label
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "profile": profile,
                "period": label,
                "since": since,
                "until": since,
                "window": "last 1d",
                "files": ["report.html", "report.json"],
                "summary": summary,
            }
        )
    )


def test_index_lists_runs_newest_first_with_changes(tmp_path):
    _write_run(tmp_path, "daily", "2026-11-02", "2026-11-02T00:00:00Z", _summary(100, 0.9, 0.9, 2000))
    _write_run(tmp_path, "daily", "2026-11-03", "2026-11-03T00:00:00Z", _summary(150, 0.92, 0.91, 1000))
    _write_run(tmp_path, "weekly", "2026-W44", "2026-10-26T00:00:00Z", _summary(700, 0.9, 0.9, 2000))
    (tmp_path / "daily" / ".2026-11-04.new.x").mkdir()  # a run in progress
    (tmp_path / "daily" / ".2026-11-04.new.x" / "summary.json").write_text("{")
    _write_run(tmp_path, "daily", "broken", "2026-11-05T00:00:00Z", {})
    (tmp_path / "daily" / "broken" / "summary.json").write_text("not json")
    runs = collect_runs(tmp_path)
    assert [r["period"] for r in runs["daily"]] == ["2026-11-02", "2026-11-03"]
    assert runs["daily"][0]["changes"] is None and runs["daily"][1]["previous"] == "2026-11-02"
    assert runs["daily"][1]["changes"]["requests"] == pytest.approx(0.5)
    page = render_index(runs, "2026-11-05T00:00:00Z")
    assert page.index("2026-11-03") < page.index("2026-11-02")  # newest first
    assert "Δ requests" in page and "▲ +50.0%" in page and "▼ −50.0%" in page and "+2.00 pp" in page
    assert 'href="daily/2026-11-03/report.html"' in page and "weekly" in page


# -- the cron loop --------------------------------------------------------------------------------


class Clock:
    def __init__(self, t: datetime):
        self.t = t
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += timedelta(seconds=s)


def _profile(tmp_path, cron="15 0 * * *"):
    return profile_from_dict(
        {"window": {"period": "last 1d"}, "schedule": {"cron": cron}, "output": {"root": str(tmp_path)}}, name="daily"
    )


def test_latest_slot_includes_now():
    assert latest_slot("15 0 * * *", AT) == AT
    assert latest_slot("15 0 * * *", AT - timedelta(seconds=1)) == AT - timedelta(days=1)


def test_catch_up_runs_the_missed_period_once_then_follows_cron(tmp_path):
    clock, runs = Clock(datetime(2026, 11, 5, 10, 0)), []
    prof = _profile(tmp_path)
    n = schedule([prof], run=lambda p, at: runs.append(at), now=clock.now, sleep=clock.sleep, max_runs=3)
    assert n == 3
    # The machine was off on Nov 3 and 4: only the latest slot (Nov 5 00:15) is caught up.
    assert runs == [datetime(2026, 11, 5, 0, 15), datetime(2026, 11, 6, 0, 15), datetime(2026, 11, 7, 0, 15)]
    assert clock.slept[0] == pytest.approx((datetime(2026, 11, 6, 0, 15) - datetime(2026, 11, 5, 10)).total_seconds())


def test_existing_period_is_not_caught_up(tmp_path):
    prof = _profile(tmp_path)
    (tmp_path / "daily" / "2026-11-04").mkdir(parents=True)  # the period of the Nov 5 slot
    clock, runs, events = Clock(datetime(2026, 11, 5, 10, 0)), [], []
    n = schedule(
        [prof],
        run=lambda p, at: runs.append(at),
        now=clock.now,
        sleep=clock.sleep,
        once=True,
        on_event=lambda kind, *a: events.append(kind),
    )
    assert (n, runs, events) == (0, [], ["skipped"])


def test_a_long_sleep_runs_only_the_latest_slot(tmp_path):
    clock, runs = Clock(datetime(2026, 11, 5, 10, 0)), []
    prof = _profile(tmp_path)

    def oversleep(s):  # a suspended machine wakes three days late
        clock.t += timedelta(seconds=s, days=3)

    schedule([prof], run=lambda p, at: runs.append(at), now=clock.now, sleep=oversleep, max_runs=2)
    assert runs == [datetime(2026, 11, 5, 0, 15), datetime(2026, 11, 9, 0, 15)]


def test_a_failing_run_is_reported_and_the_loop_goes_on(tmp_path):
    clock, events = Clock(datetime(2026, 11, 5, 10, 0)), []

    def run(p, at):
        if at.day == 5:
            raise ConfigError("boom")
        return "ok"

    n = schedule(
        [_profile(tmp_path)],
        run=run,
        now=clock.now,
        sleep=clock.sleep,
        max_runs=2,
        on_event=lambda kind, p, slot, what: events.append((kind, slot.day, str(what))),
    )
    assert n == 2 and events == [("failed", 5, "boom"), ("ran", 6, "ok")]


def test_two_profiles_share_the_loop(tmp_path):
    clock, runs = Clock(datetime(2026, 11, 2, 0, 30)), []  # Monday
    daily = _profile(tmp_path)
    weekly = profile_from_dict(
        {"window": {"period": "calendar week"}, "schedule": {"cron": "0 1 * * 1"}, "output": {"root": str(tmp_path)}},
        name="weekly",
    )
    schedule([daily, weekly], run=lambda p, at: runs.append((p.name, at)), now=clock.now, sleep=clock.sleep, max_runs=4)
    assert runs == [
        ("daily", datetime(2026, 11, 2, 0, 15)),
        ("weekly", datetime(2026, 10, 26, 1, 0)),
        ("weekly", datetime(2026, 11, 2, 1, 0)),
        ("daily", datetime(2026, 11, 3, 0, 15)),
    ]


def test_a_profile_without_cron_is_refused(tmp_path):
    prof = profile_from_dict({"output": {"root": str(tmp_path)}}, name="x")
    with pytest.raises(ConfigError, match="no \\[schedule\\] cron"):
        schedule([prof], run=lambda *a, **k: None, once=True)


# -- the deployment examples stay in step with the profiles ---------------------------------------

SCHEDULED = Path(__file__).resolve().parents[1] / "collectors" / "scheduled"


def test_cron_example_matches_the_profiles():
    from croniter import croniter

    lines = [
        ln
        for ln in (SCHEDULED / "kvtrace.cron").read_text().splitlines()
        if ln.strip() and not ln.startswith("#") and "=" not in ln.split()[0]
    ]
    assert len(lines) == 2
    for ln in lines:
        fields = ln.split()
        expr, name = " ".join(fields[:5]), Path(fields[fields.index("run") + 1]).stem
        assert croniter.is_valid(expr) and expr == load_profile(name).cron, ln


def test_kubernetes_example_embeds_a_valid_profile():
    import tomllib

    text = (SCHEDULED / "kubernetes-cronjob.yaml").read_text()
    block = text.split("daily.toml: |\n", 1)[1]
    toml = "\n".join(ln[4:] for ln in block.splitlines() if ln.startswith("    ") or not ln.strip())
    prof = profile_from_dict(tomllib.loads(toml), name="daily")
    assert f'schedule: "{prof.cron}"' in text and prof.window == "last 1d"
