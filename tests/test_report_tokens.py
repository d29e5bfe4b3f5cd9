"""Token mix and the report dict, on rows with known totals."""

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.analyze.token_mix import CLASSES, mix_from_totals
from kvtrace.errors import ConfigError
from kvtrace.ingest.pipeline import IngestSummary, _merge
from kvtrace.report import render
from kvtrace.report.build import SCHEMA_VERSION, ReportOptions, build_report
from tests.builders import parsed


def load(store, *rows):
    with store.transaction():
        _merge(store, parsed(*rows), IngestSummary())


@pytest.fixture
def week(store):
    # two days, two models, a main thread and a subagent
    load(
        store,
        dict(
            request_key="a",
            ts=0,
            cache_read_tokens=9816,
            cache_write_5m_tokens=100,
            cache_write_1h_tokens=52,
            output_tokens=30,
            input_tokens=2,
            session_id="s1",
        ),
        dict(
            request_key="b",
            ts=60 * 24,
            model="claude-opus-4-6",
            cache_read_tokens=1000,
            cache_write_unknown_tokens=500,
            output_tokens=70,
            input_tokens=8,
            session_id="s2",
            query_source="subagent",
            thread_id="agent-x",
        ),
    )
    return store


def test_token_mix_totals_and_shares(week):
    d = build_report(week).data
    m = d["token_mix"]
    assert d["schema_version"] == SCHEMA_VERSION
    assert (d["requests"], d["sessions"]) == (2, 2)
    assert m["cache_read"] == 10816 and m["cache_write_5m"] == 100 and m["cache_write_1h"] == 52
    assert m["cache_write_unknown"] == 500 and m["output"] == 100 and m["input_uncached"] == 10
    assert m["total"] == 10816 + 100 + 52 + 500 + 100 + 10
    assert m["cache_hit_ratio"] == pytest.approx(10816 / (10816 + 652 + 10))
    assert sum(m["shares"][k] for k in CLASSES) == pytest.approx(1.0)


def test_groups_and_window(week):
    d = build_report(week, ReportOptions(group_by=["day", "model", "query_source"])).data
    assert [e["key"] for e in d["groups"]["day"]] == ["2026-11-02", "2026-11-03"]
    assert {e["key"]: e["requests"] for e in d["groups"]["query_source"]} == {"main": 1, "subagent": 1}
    one = build_report(week, ReportOptions(since="2026-11-03")).data
    assert one["requests"] == 1 and one["token_mix"]["output"] == 70
    last_day = build_report(week, ReportOptions(since="12h")).data  # a span back from the last record
    assert last_day["requests"] == 1
    with pytest.raises(ConfigError, match="--group-by"):
        build_report(week, ReportOptions(group_by=["colour"]))
    with pytest.raises(ConfigError, match="not before"):
        build_report(week, ReportOptions(since="2026-11-05", until="2026-11-01"))


def test_renderers_show_the_same_numbers(week):
    d = build_report(week, ReportOptions(group_by=["model"])).data
    buf = io.StringIO()
    render.render_json(d, buf)
    assert json.loads(buf.getvalue())["token_mix"]["total"] == d["token_mix"]["total"]
    md = io.StringIO()
    render.render_markdown(d, md)
    assert "| Cache read | 10,816 |" in md.getvalue()
    from rich.console import Console

    term = io.StringIO()
    render.render_terminal(d, Console(file=term, width=140))
    assert "10,816" in term.getvalue() and "claude-opus-4-6" in term.getvalue()


def test_empty_warehouse_reports_zeros(store):
    d = build_report(store).data
    assert d["requests"] == 0 and d["token_mix"]["total"] == 0 and d["token_mix"]["cache_hit_ratio"] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=len(CLASSES), max_size=len(CLASSES)))
def test_shares_sum_to_one(values):
    m = mix_from_totals(dict(zip(CLASSES, values)))
    total = sum(m["shares"][k] for k in CLASSES)
    assert total == pytest.approx(1.0) if m["total"] else total == 0
    assert 0.0 <= m["cache_hit_ratio"] <= 1.0


def test_rows_without_a_session_are_not_a_session(store):
    load(
        store,
        dict(request_key="a", ts=0, output_tokens=1, session_id="s1"),
        dict(request_key="b", ts=1, output_tokens=1, session_id=None),
    )
    d = build_report(store, ReportOptions(group_by=["day"])).data
    assert d["requests"] == 2 and d["sessions"] == 1
    assert d["groups"]["day"][0]["sessions"] == 1


_ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "ts": st.integers(0, 6 * 24 * 60),  # minutes over six days
            "model": st.sampled_from(["claude-sonnet-4-6", "claude-opus-4-6"]),
            "session_id": st.sampled_from(["s1", "s2", "s3", None]),
            "user_id": st.sampled_from(["u1", "u2", None]),
            "query_source": st.sampled_from(["main", "subagent"]),
            "project": st.sampled_from(["p", "q", None]),
            "cache_read_tokens": st.integers(0, 10**6),
            "cache_write_5m_tokens": st.integers(0, 10**4),
            "output_tokens": st.integers(0, 10**4),
            "input_tokens": st.integers(0, 100),
        }
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None)
@given(_ROWS, st.sampled_from([None, "2026-11-04"]))
def test_groups_match_a_recount_of_the_rows(rows, since):
    """Every group's entries, recounted in Python from the rows themselves: requests, distinct
    sessions and each token class per key; time keys in order, others largest total first."""
    import datetime as dt

    from kvtrace.analyze.token_mix import GROUPS
    from kvtrace.store import Store

    s = Store(memory=True)
    try:
        load(s, *[dict(r, request_key=f"k{i}") for i, r in enumerate(rows)])
        d = build_report(s, ReportOptions(group_by=list(GROUPS), since=since)).data
    finally:
        s.close()
    start = dt.datetime(2026, 11, 2, 9, 0)
    lo = dt.datetime.fromisoformat(since) if since else None
    kept = [dict(r, t=start + dt.timedelta(minutes=r["ts"])) for r in rows]
    kept = [r for r in kept if lo is None or r["t"] >= lo]
    key_of = {
        "day": lambda r: r["t"].strftime("%Y-%m-%d"),
        "hour": lambda r: r["t"].strftime("%Y-%m-%dT%H:00"),
        "model": lambda r: r["model"],
        "user": lambda r: r["user_id"],
        "session": lambda r: r["session_id"],
        "query_source": lambda r: r["query_source"],
        "agent": lambda r: "claude-code",
        "project": lambda r: r["project"],
    }
    assert d["requests"] == len(kept)
    assert d["sessions"] == len({r["session_id"] for r in kept} - {None})
    for g, key in key_of.items():
        want: dict = {}
        for r in kept:
            w = want.setdefault(key(r), {"requests": 0, "sessions": set(), "cache_read": 0, "output": 0})
            w["requests"] += 1
            w["sessions"] |= {r["session_id"]} - {None}
            w["cache_read"] += r["cache_read_tokens"]
            w["output"] += r["output_tokens"]
        got = {
            e["key"]: {
                "requests": e["requests"],
                "sessions": e["sessions"],
                "cache_read": e["token_mix"]["cache_read"],
                "output": e["token_mix"]["output"],
            }
            for e in d["groups"][g]
        }
        assert got == {k: dict(w, sessions=len(w["sessions"])) for k, w in want.items()}, g
        entries = d["groups"][g]
        if g in ("day", "hour"):
            assert [e["key"] for e in entries] == sorted(e["key"] for e in entries)
        else:
            totals = [e["token_mix"]["total"] for e in entries]
            assert totals == sorted(totals, reverse=True)
    series = d["series"]["token_mix"]
    if not kept:  # an empty window is charted per day, with nothing in it
        assert series == {"bucket": "day", "entries": []}
        return
    span = max(r["t"] for r in kept) - min(r["t"] for r in kept)
    assert series["bucket"] == ("hour" if span <= dt.timedelta(days=3) else "day")
    assert series["entries"] == d["groups"][series["bucket"]]


def test_a_token_mix_report_imports_neither_polars_nor_arrow(tmp_path):
    """The token-mix report is summed by DuckDB: its process never loads Polars or pyarrow
    (a quarter of a second of start-up)."""
    import subprocess
    import sys

    from kvtrace.store import Store

    db = tmp_path / "kv.duckdb"
    with Store(db) as s:
        load(s, dict(request_key="a", ts=0, output_tokens=5))
    code = (
        "import sys, json\nfrom kvtrace.store import Store\nfrom kvtrace.report.build import build_report, ReportOptions\n"
        f"s = Store({str(db)!r}, read_only=True)\n"
        "d = build_report(s, ReportOptions(group_by=['day', 'model', 'session'])).data\n"
        "print(json.dumps([d['requests'], [m for m in ('polars', 'pyarrow', 'numpy') if m in sys.modules]]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [1, []]
