"""The capacity for a TTL in one line: per TTL, the smallest LRU capacity reaching 90%, 99% and
100% of the hit ratio that TTL allows, and where each tier lands; exact to the block (against
the oracle), in the replay result, the report's tier section (which now takes a TTL) and every
rendering."""

from __future__ import annotations

import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.replay import load_tiers, replay, resolve_model
from kvtrace.replay.tracefile import read_trace
from kvtrace.report import render
from kvtrace.report.build import ReportOptions, build_report, tier_ttl_s
from kvtrace.report.html import _body
from kvtrace.store import Store
from tests.paths import CONVERSATION
from tests.replay_oracle import any_trace, prefix_trace, simulate
from tests.report_samples import load_rows, week_rows

runner = CliRunner()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(prefix_trace(), any_trace()), st.sampled_from([None, 2.0, 5.0]))
def test_each_capacity_is_the_smallest_that_reaches_its_share(trace, ttl):
    res = replay(trace, capacities=[None], ttls=[ttl])
    (c,) = res.capacity
    ttl_us = None if ttl is None else int(ttl * 1e6)
    top = simulate(trace, None, ttl_us)[1]
    assert c["hit_ratio_tokens"] == pytest.approx(top / max(int(trace.input_length.sum()), 1))
    for r in c["reach"]:
        target = math.ceil(r["share"] * top - 1e-9)
        blocks = r["capacity_blocks"]
        assert simulate(trace, blocks, ttl_us)[1] >= target
        if blocks > 0:
            assert simulate(trace, blocks - 1, ttl_us)[1] < target
        assert r["capacity_tokens"] == blocks * trace.block_size


@pytest.fixture(scope="module")
def conversation():
    trace = read_trace(CONVERSATION)
    return trace, replay(
        trace,
        ttls=[300.0, 3600.0, None],
        model=resolve_model("MiniMax-M2.7:fp8"),
        tiers=load_tiers("seed-testbed"),
        tier_ttl=3600.0,
    )


def test_capacity_on_the_mooncake_conversation_trace(conversation):
    trace, res = conversation
    peaks = {w["ttl_s"]: w["peak_tokens"] for w in res.working_set}
    bpt = res.model["bytes_per_block"] / trace.block_size
    for c in res.capacity:
        caps = [r["capacity_tokens"] for r in c["reach"]]
        assert [r["share"] for r in c["reach"]] == [0.9, 0.99, 1.0]
        assert caps == sorted(caps) and caps[-1] <= peaks[c["ttl_s"]]  # the peak working set bounds it
        assert all(r["capacity_bytes"] == r["capacity_tokens"] * bpt for r in c["reach"])
        assert c["reach"][-1]["hit_ratio_tokens"] == pytest.approx(c["hit_ratio_tokens"])
        # a tier lands where one LRU cache of its depth does
        for x, tier in zip(c["tiers"], res.tiers["tiers"]):
            assert x["name"] == tier["name"] and x["depth_tokens"] == tier["depth_tokens"]
            grid = replay(trace, capacities=[x["depth_tokens"]], ttls=[c["ttl_s"]])
            assert x["hit_ratio_tokens"] == pytest.approx(grid.grid[0]["hit_ratio_tokens"])
            assert x["share_of_ceiling"] == pytest.approx(x["hit_ratio_tokens"] / c["hit_ratio_tokens"])
    one_hour = next(c for c in res.capacity if c["ttl_s"] == 3600.0)
    # figures of this trace (512-token blocks): 37.36% at most under 1 h, 90% of it from 16.09 M tokens
    assert one_hour["hit_ratio_tokens"] == pytest.approx(0.3736, abs=5e-5)
    assert one_hour["reach"][0]["capacity_tokens"] == 16_094_720
    assert res.to_dict()["capacity"] == res.capacity


def test_replay_command_prints_the_capacity_table():
    res = runner.invoke(app, ["replay", str(CONVERSATION), "--ttl", "1h", "-c", "1M"])
    assert res.exit_code == 0, res.output
    assert "Capacity for each TTL" in res.output and "90% of it needs" in res.output and "16.09 M" in res.output


# -- the report -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def week_store():
    with Store(memory=True) as s:
        load_rows(s, week_rows(days=2))
        yield s


def test_the_tier_ttl_of_a_report(week_store):
    assert tier_ttl_s(ReportOptions(ttls=[300.0])) == 300.0  # the one --ttl, as kvtrace replay
    assert tier_ttl_s(ReportOptions(ttls=[300.0, 3600.0])) is None
    assert tier_ttl_s(ReportOptions(ttls=[300.0, 3600.0], tier_ttl=3600.0)) == 3600.0
    assert tier_ttl_s(ReportOptions(ttls=[300.0], tier_ttl=math.inf)) is None
    d = build_report(
        week_store, ReportOptions(ttls=[300.0, 3600.0], tier_ttl=3600.0, tiers="seed-testbed", model="MiniMax-M2.7:fp8")
    ).data
    assert d["tiers"]["ttl_s"] == 3600.0
    assert [c["ttl_s"] for c in d["tiers"]["capacity"]] == [300.0, 3600.0, None]


@pytest.fixture(scope="module")
def sized(week_store):
    return build_report(
        week_store, ReportOptions(ttls=[300.0, 3600.0], tier_ttl=3600.0, tiers="seed-testbed", model="MiniMax-M2.7:fp8")
    ).data


def test_capacity_in_json_markdown_html_and_terminal(sized):
    cap = sized["tiers"]["capacity"]
    one_hour = next(c for c in cap if c["ttl_s"] == 3600.0)
    assert [x["name"] for x in one_hour["tiers"]] == ["HBM", "DRAM", "NVMe"]
    assert all(r["capacity_bytes"] is not None for r in one_hour["reach"])
    js = io.StringIO()
    render.render_json(sized, js)
    assert json.loads(js.getvalue())["tiers"]["capacity"][1]["reach"][0]["share"] == 0.9
    md = io.StringIO()
    render.render_markdown(sized, md)
    text = md.getvalue()
    assert "## Capacity for each TTL" in text and "| 1h |" in text and "90% of it needs" in text
    assert "HBM (to " in text and " GB)" in text
    page = _body(sized, {})
    assert "Capacity for each TTL" in page and "<th>100% needs</th>" in page
    from rich.console import Console

    term = io.StringIO()
    render.render_terminal(sized, Console(file=term, width=220))
    assert "Capacity for each TTL" in term.getvalue()


def test_report_command_takes_the_tier_ttl(tmp_path):
    db = tmp_path / "kv.duckdb"
    with Store(db) as s:
        load_rows(s, week_rows(days=1))
    res = runner.invoke(
        app,
        [
            "report",
            "--db",
            str(db),
            "--ttl",
            "5m,1h",
            "--tier-ttl",
            "1h",
            "--tiers",
            "seed-testbed",
            "--model",
            "MiniMax-M2.7:fp8",
            "-f",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["tiers"]["ttl_s"] == 3600.0 and len(d["tiers"]["capacity"]) == 3
    bad = runner.invoke(app, ["report", "--db", str(db), "--tiers", "seed-testbed", "--tier-ttl", "soon"])
    assert bad.exit_code == 1 and "--tier-ttl" in bad.output


def test_a_profile_sets_the_tier_ttl(tmp_path):
    from kvtrace.schedule.profile import profile_from_dict

    prof = profile_from_dict({"analysis": {"ttls": ["5m", "1h"], "tier_ttl": "1h"}}, name="p")
    assert prof.tier_ttl == "1h"
