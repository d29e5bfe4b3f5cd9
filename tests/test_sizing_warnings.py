"""Capacity figures say when they rest on too little data: a TTL of 0, a TTL as long as the trace,
a trace too short for the working set to reach a steady state, too few sessions; in the terminal
and the JSON of every command that sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.working_set import sizing_warnings
from kvtrace.cli import app
from tests.paths import CONVERSATION

CONV = str(CONVERSATION)  # 12,031 requests over 59 minutes, no sessions
SAMPLE_LOGS = Path(__file__).resolve().parents[1] / "sample_traces" / "otlp" / "logs.jsonl.gz"


def _trace(n: int, span_s: float, sessions: int | None) -> BlockTrace:
    ts = np.linspace(0.0, span_s, n)
    return BlockTrace.from_lists(
        ts,
        np.full(n, 64),
        np.ones(n, dtype=np.int64),
        [[i % 7] for i in range(n)],
        64,
        session=None if sessions is None else np.arange(n) % sessions,
    )


def test_each_condition_and_none_for_a_sound_trace():
    week = _trace(5000, 5 * 86400, 60)
    assert sizing_warnings(week, [60, 300, 3600, None]) == []
    hour = _trace(5000, 3540, None)
    w = sizing_warnings(hour, [300, 3600, 7200, None])
    assert len(w) == 1 and w[0].startswith("The 1h, 2h TTLs are as long as the trace (59m)")
    w = sizing_warnings(hour, [2400])
    assert len(w) == 1 and "covers less than twice the 40m TTL" in w[0] and "steady state" in w[0]
    assert sizing_warnings(hour, [0.0])[0].startswith("TTL 0 s keeps nothing")
    few = _trace(40, 90 * 86400, 3)
    assert sizing_warnings(few, [300])[0].startswith("Only 3 sessions (40 requests over 90d)")
    assert sizing_warnings(_trace(40, 86400, None), [300])[0].startswith("Only 40 requests")
    assert sizing_warnings(_trace(0, 0, None), [0.0]) == []


def _sessions(lifetime_min: int | None, hours: float = 6.0, every: int | None = None) -> BlockTrace:
    """A session starts every 5 minutes (``every(minute)``: the minutes between starts from then)
    and sends a request a minute, its prompt one block longer each time; it ends after
    ``lifetime_min`` minutes (None: it never ends, so the number of live sessions, and the
    working set with them, grows to the end of the trace)."""
    rows = []
    starts, m = [], 0
    while m < int(hours * 60):
        starts.append(m)
        m += 5 if every is None else every(m)
    for start in starts:
        end = int(hours * 60) if lifetime_min is None else min(int(hours * 60), start + lifetime_min)
        for m in range(start, end):
            rows.append((m * 60.0 + start / 100, start, [start * 10_000 + k for k in range(m - start + 1)]))
    rows.sort(key=lambda r: r[0])
    ids = [r[2] for r in rows]
    return BlockTrace.from_lists(
        np.array([r[0] for r in rows]),
        np.array([64 * len(h) for h in ids]),
        np.zeros(len(rows), dtype=np.int64),
        ids,
        64,
        session=np.array([r[1] for r in rows]),
    )


def test_a_working_set_still_rising_at_the_end_is_said_and_a_settled_one_is_not():
    rising = sizing_warnings(_sessions(None), [300, 3600])
    assert len(rising) == 1 and rising[0].startswith("The working set was still rising when the trace ended, at 5m (+")
    assert "1h (+" in rising[0]
    assert sizing_warnings(_sessions(30), [300, 3600]) == []
    # a day's load: sessions start more and more often until midday, then less and less often
    day = _sessions(30, hours=12, every=lambda m: 1 + abs(m - 360) // 40)
    assert sizing_warnings(day, [300, 3600]) == []


@pytest.mark.parametrize("engine", ["numpy", "numba", "blocks"])
def test_replay_peaks_over_time_equal_the_working_set_s(engine):
    from kvtrace.analyze.working_set import peak_by_time
    from kvtrace.replay.engine import replay

    for trace in (_sessions(None), _sessions(30)):
        r = replay(trace, capacities=[640], ttls=[300.0, 3600.0], engine=engine)
        assert r.warnings == sizing_warnings(trace, [300.0, 3600.0])
    from kvtrace.replay.distances import compute_distances

    trace = _sessions(None)
    dist = compute_distances(trace, [300_000_000, 3_600_000_000], engine=engine)
    for tau in (300_000_000, 3_600_000_000):
        assert dist.peak_by_time[tau].tolist() == peak_by_time(trace, tau / 1e6).tolist()


def _invoke(*args):
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r


def test_replay_warns_of_a_ttl_as_long_as_the_trace():
    out = json.loads(
        _invoke("replay", CONV, "-c", "1M", "--ttl", "5m,1h", "--block-size", "512", "--format", "json").stdout
    )
    assert out["warnings"] == [
        "The 1h TTL is as long as the trace (58.9 min) or longer: nothing expires within it, so the working set is "
        "everything the trace touched, not a steady state; size on a trace several times longer than the TTL."
    ]
    assert "Warning: The 1h TTL is as long as the trace" in _invoke("replay", CONV, "-c", "1M", "--ttl", "1h").output
    ok = json.loads(
        _invoke("replay", CONV, "-c", "1M", "--ttl", "5m", "--block-size", "512", "--format", "json").stdout
    )
    assert ok["warnings"] == []


def test_reuse_warns_of_a_ttl_of_zero():
    out = json.loads(_invoke("reuse", CONV, "--ttl", "0s,5m", "--format", "json").stdout)
    assert any(w.startswith("TTL 0 s keeps nothing") for w in out["warnings"])
    assert "Warning: TTL 0 s keeps nothing" in _invoke("reuse", CONV, "--ttl", "0s").output


def test_size_warns_of_a_ttl_of_zero():
    out = json.loads(_invoke("size", "--rate", "4200", "--ttl", "0s", "--format", "json").stdout)
    assert out["capacity_tokens"] == 0 and out["warnings"][0].startswith("TTL 0 s keeps nothing")
    assert "Warning: TTL 0 s" in _invoke("size", "--rate", "4200", "--ttl", "0s").output
    assert "warnings" not in json.loads(_invoke("size", "--rate", "4200", "--ttl", "1h", "--format", "json").stdout)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("warn") / "w.duckdb")
    _invoke("ingest", "--db", path, str(SAMPLE_LOGS))
    return path


def test_report_warns_of_a_window_of_two_sessions(db):
    args = ["report", "--db", db, "--ttl", "5m,1h", "--since", "2026-03-06T16:00"]
    out = json.loads(_invoke(*args, "--format", "json").stdout)
    assert [w.split(":")[0] for w in out["warnings"]] == [
        "Only 2 sessions (91 requests over 28.4 min)",
        "The 1h TTL is as long as the trace (28.4 min) or longer",
    ]
    text = _invoke(*args).output
    assert "Warning: Only 2 sessions" in text and "Warning: The 1h TTL" in text
    whole = json.loads(_invoke("report", "--db", db, "--ttl", "5m,1h", "--format", "json").stdout)
    assert "warnings" not in whole  # 58 sessions over five days
