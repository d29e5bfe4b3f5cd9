"""A load generator's admission control (``--max-in-flight``): turns wait at the client while the
cap of requests in flight is reached, and TTFT is timed from when they are sent."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.errors import ConfigError
from kvtrace.simulate.engine import Chain, Fleet, Node, Policy, Turn
from kvtrace.simulate.run import Scenario, _unserved, parse_config, run_config

from tests.simulate_support import FixedCost

runner = CliRunner()


def _in_flight_peak(turns: list[Turn]) -> int:
    """The most turns sent and not yet completed at any instant (a completion frees its slot
    before a send at the same instant)."""
    events = sorted([(t.done_t, 0) for t in turns] + [(t.issue_t, 1) for t in turns])
    peak = now = 0
    for _, kind in events:
        now += 1 if kind else -1
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("nodes, router, cap", [(1, "round-robin", 3), (2, "round-robin", 2), (2, "least-loaded", 1)])
def test_the_cap_bounds_requests_in_flight_and_held_turns_go_first_come_first_served(nodes, router, cap):
    fleet = Fleet([Node(FixedCost(0.01), 100_000, [], Policy(), keep_turns=True) for _ in range(nodes)], router, cap)
    turns = [Turn(Chain(), 500 + 10 * i, 5 + i) for i in range(12)]

    def start(f):
        for i, t in enumerate(turns):
            f.at(0.001 * i, lambda now, t=t: f.issue(t))

    fleet.run(start, 60)
    assert all(t.done_t is not None for t in turns)
    assert _in_flight_peak(turns) == cap * nodes
    # held turns are sent in the order their clients wanted to send them, each when a slot frees
    sent = sorted(turns, key=lambda t: (t.issue_t, t.seq))
    assert [t.want_t for t in sent] == sorted(t.want_t for t in turns)
    done = sorted(t.done_t for t in turns)
    for k, t in enumerate(sent[cap * nodes :]):
        assert t.issue_t == pytest.approx(max(done[k], t.want_t))
    waits = [t.issue_t - t.want_t for t in turns]
    assert min(waits) == 0 and max(waits) > 0


def test_a_cap_no_load_reaches_changes_nothing_and_a_reached_one_moves_the_queue_to_the_client():
    sc = Scenario(duration_s=900, rate_per_min=5, gpu_kv_tokens=200_000)
    cfg = parse_config("gpu=seed-testbed:HBM")
    free = run_config(sc, cfg)
    assert run_config(Scenario(**{**sc.__dict__, "max_in_flight": 10_000}), cfg) == free
    capped = run_config(Scenario(**{**sc.__dict__, "max_in_flight": 2}), cfg)
    r0, r2 = free["ttft"]["all"], capped["ttft"]["all"]
    assert r0["client_wait_max_s"] == 0
    assert r2["client_wait_max_s"] > 0 and r2["queue_p50_s"] <= r0["queue_p50_s"]
    assert max(s["running"] + s["waiting"] for s in capped["series"]) <= 2


def test_the_cli_reports_client_waits_and_refuses_a_cap_when_sizing_a_fleet(tmp_path):
    base = ["simulate", "--config", "gpu=seed-testbed:HBM", "--gpu-kv", "200K", "--duration", "10m", "--rate", "5"]
    r = runner.invoke(app, [*base, "--max-in-flight", "2", "--format", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["max_in_flight"] == 2
    assert res["configs"][0]["ttft"]["resumed"].keys() >= {
        "client_wait_p50_s",
        "client_wait_p90_s",
        "client_wait_max_s",
    }
    r = runner.invoke(app, [*base, "--max-in-flight", "2"])
    assert r.exit_code == 0 and "client p50" in r.output
    page = tmp_path / "sim.html"
    r = runner.invoke(app, [*base, "--max-in-flight", "2", "--format", "html", "--out", str(page)])
    assert r.exit_code == 0, r.output
    html = page.read_text()
    assert "at most 2 requests in flight per node" in html and "client wait p50" in html
    r = runner.invoke(app, [*base, "--max-in-flight", "2", "--nodes", "auto", "--ttft-p90", "2"])
    assert r.exit_code == 1 and "hides the queue" in r.output
    r = runner.invoke(app, [*base, "--max-in-flight", "-1"])
    assert r.exit_code == 1 and "--max-in-flight must be a whole number" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text('max_in_flight = "16"\n')
    r = runner.invoke(app, ["simulate", "--scenario", str(bad)])
    assert r.exit_code == 1 and "bad.toml: max_in_flight must be a whole number" in r.output
    with pytest.raises(ConfigError, match="a cap of -1 requests in flight"):
        Fleet([Node(FixedCost(0.01), 1_000, [], Policy())], max_in_flight=-1)


def test_unserved_counts_the_turns_without_a_first_token_sent_by_the_end_with_their_waits():
    # a long turn sent 0.8 s before the end; one held behind the cap of 1; one its client sends at
    # 60.1 s, while the node finishes its step past the end: two unserved, the longest waited 0.8 s
    fleet = Fleet([Node(FixedCost(0.5), 100_000, [], Policy())], max_in_flight=1)
    late, held, after = Turn(Chain(), 30_000, 10), Turn(Chain(), 100, 1), Turn(Chain(), 100, 1)

    def start(f):
        f.at(59.2, lambda now: f.issue(late))
        f.at(59.5, lambda now: f.issue(held))
        f.at(60.1, lambda now: f.issue(after))

    fleet.run(start, 60)
    assert after.want_t == pytest.approx(60.1) and late.first_t is None
    assert _unserved(fleet, 60.0) == {"unserved": 2, "unserved_wait": pytest.approx(0.8)}


def test_a_preempted_turn_that_had_its_first_token_is_not_unserved():
    node = Node(FixedCost(0.01), 1_024, [], Policy(block_tokens=16))
    fleet = Fleet([node])
    turns = [Turn(Chain(), 400, 300) for _ in range(2)]

    def start(f):
        for t in turns:
            f.at(0.0, lambda now, t=t: f.issue(t))

    fleet.run(start, 2.0)  # the second was preempted after its first token and waits for the first
    assert node.metrics.preemptions >= 1 and node.waiting and all(t.first_t is not None for t in turns)
    assert _unserved(fleet, 2.0) == {"unserved": 0, "unserved_wait": None}
