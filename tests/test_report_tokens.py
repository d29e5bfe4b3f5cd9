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
    load(store,
         dict(request_key="a", ts=0, cache_read_tokens=9816, cache_write_5m_tokens=100, cache_write_1h_tokens=52,
              output_tokens=30, input_tokens=2, session_id="s1"),
         dict(request_key="b", ts=60 * 24, model="claude-opus-4-6", cache_read_tokens=1000, cache_write_unknown_tokens=500,
              output_tokens=70, input_tokens=8, session_id="s2", query_source="subagent", thread_id="agent-x"))
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
    load(store, dict(request_key="a", ts=0, output_tokens=1, session_id="s1"),
         dict(request_key="b", ts=1, output_tokens=1, session_id=None))
    d = build_report(store, ReportOptions(group_by=["day"])).data
    assert d["requests"] == 2 and d["sessions"] == 1
    assert d["groups"]["day"][0]["sessions"] == 1
