"""Fleets of nodes behind a router: session affinity (independent nodes) against per-request
round robin and least loaded (one event clock)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.replay.catalog import resolve_model
from kvtrace.errors import ConfigError
from kvtrace.simulate.engine import Chain, Fleet, Node, Policy, Turn
from kvtrace.simulate.run import Scenario, parse_config, run_config

from tests.simulate_support import FixedCost

MODEL = resolve_model("MiniMax-M2.7:fp8")
runner = CliRunner()


def _nodes(n: int, kv: int = 100_000) -> list[Node]:
    return [Node(FixedCost(0.1), kv, [], Policy(), keep_turns=True) for _ in range(n)]


def test_round_robin_sends_a_sessions_next_turn_to_the_other_node_where_it_misses():
    fleet = Fleet(_nodes(2), "round-robin")
    ch = Chain()
    turns = []

    def start(f):
        def send(i):  # a turn keeps what its chain holds when it is sent
            turns.append(Turn(ch, 2_000 + 100 * i, 1))
            turns[i].on_done = (lambda t: f.at(t + 1.0, lambda now: send(i + 1))) if i < 2 else None
            f.issue(turns[i])

        f.at(0.0, lambda now: send(0))

    m0, m1 = fleet.run(start, 60)
    assert [t.node for t in turns] == [0, 1, 0]
    assert turns[1].hits == [0]  # node 1 never saw the session
    assert turns[2].hits == [2_000]  # node 0 still holds the first turn's whole blocks
    assert m0.prompt_tok.sum() == 2_000 + 2_200 and m1.prompt_tok.sum() == 2_100


def test_a_rewritten_chain_is_stale_on_every_node_not_only_the_one_it_is_sent_to():
    fleet = Fleet(_nodes(2), "round-robin")
    ch = Chain()
    turns = [Turn(ch, 4_000, 1)]

    def send(f, **kw):
        turns.append(Turn(ch, kw.pop("prompt"), 1, **kw))
        f.issue(turns[-1])

    def start(f):
        f.at(0.0, lambda now: f.issue(turns[0]))  # node 0 holds 4,000 tokens
        f.at(10.0, lambda now: send(f, prompt=3_000, keep=0))  # node 1: new content from token 0
        f.at(20.0, lambda now: send(f, prompt=3_100))  # node 0: its old copy is stale

    fleet.run(start, 60)
    assert [t.node for t in turns] == [0, 1, 0]
    assert turns[2].hits == [0]


def test_least_loaded_sends_each_request_to_a_node_with_the_fewest_outstanding():
    """Long and short requests alternate: round robin queues every long one on node 0, least
    loaded picks, at every arrival, the first node with the fewest requests running or waiting."""

    def run(router):
        fleet = Fleet(
            [Node(FixedCost(0.05), 400_000, [], Policy(max_num_seqs=2), keep_turns=True) for _ in range(2)], router
        )
        seen = []

        def send(f, turn):
            loads = f.loads()
            f.issue(turn)
            seen.append((loads, turn.node))

        def start(f):
            for i in range(40):
                turn = Turn(Chain(), 16_000 if i % 2 == 0 else 500, 200 if i % 2 == 0 else 5)
                f.at(0.5 * i, lambda now, turn=turn: send(f, turn))

        metrics = fleet.run(start, 600)
        ttft = np.array([q + ld + pf for m in metrics for _, _, q, ld, pf, _ in m.ttft])
        return seen, ttft

    seen, ll_ttft = run("least-loaded")
    assert len(seen) == 40
    for loads, chosen in seen:
        assert chosen == loads.index(min(loads))
    spread = max(max(loads) - min(loads) for loads, _ in seen)
    seen_rr, rr_ttft = run("round-robin")
    assert [c for _, c in seen_rr] == [i % 2 for i in range(40)]
    assert max(max(loads) - min(loads) for loads, _ in seen_rr) > spread
    assert len(ll_ttft) == len(rr_ttft) == 40
    assert np.percentile(ll_ttft, 90) < np.percentile(rr_ttft, 90)


def test_a_fleet_of_one_node_is_the_same_run_whatever_the_router():
    sc = Scenario(duration_s=600, rate_per_min=5, gpu_kv_tokens=200_000)
    cfg = parse_config("gpu=seed-testbed:HBM")
    runs = [
        run_config(Scenario(**{**sc.__dict__, "router": r}), cfg, nodes=1)
        for r in ("affinity", "round-robin", "least-loaded")
    ]
    assert runs[0] == runs[1] == runs[2]


def test_with_two_nodes_round_robin_hits_the_gpu_cache_less_than_affinity():
    sc = Scenario(duration_s=900, rate_per_min=5, gpu_kv_tokens=200_000)
    cfg = parse_config("gpu=seed-testbed:HBM")
    hit = {r: run_config(Scenario(**{**sc.__dict__, "router": r}), cfg, nodes=2) for r in ("affinity", "round-robin")}
    assert hit["affinity"]["sessions"] == hit["round-robin"]["sessions"]
    a, rr = hit["affinity"]["tiers"][0]["hit_ratio"], hit["round-robin"]["tiers"][0]["hit_ratio"]
    assert rr < a - 0.05


@pytest.mark.parametrize("router", ["affinity", "round-robin", "least-loaded"])
def test_nodes_auto_sizes_a_fleet_under_each_router(router):
    r = runner.invoke(
        app,
        [
            "simulate",
            "--config",
            "gpu=seed-testbed:HBM",
            "--gpu-kv",
            "200K",
            "--duration",
            "10m",
            "--rate",
            "5",
            "--nodes",
            "auto",
            "--ttft-p90",
            "3",
            "--router",
            router,
            "--format",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["router"] == ("session-affinity" if router == "affinity" else router)
    c = doc["configs"][0]
    tried = {t["nodes"]: t for t in c["sizing"]["tried"]}
    n = c["nodes"]
    late = {k: (v["unserved_max_wait_s"] or 0) > 3 for k, v in tried.items()}
    assert n > 1 and tried[n]["ttft_p90_s"] <= 3 and not late[n]
    assert tried[n - 1]["ttft_p90_s"] > 3 or late[n - 1]


def test_an_unknown_router_is_a_one_line_error():
    r = runner.invoke(app, ["simulate", "--config", "seed-testbed", "--router", "random"])
    assert r.exit_code == 1 and "unknown router 'random'" in r.output


def test_a_prompt_larger_than_the_gpu_is_a_clear_error_on_any_node():
    """Chunked prefill would admit a prompt larger than the cache a budget at a time, and it could
    never finish: it is refused when sent, on one node or two at the same instant."""
    for n in (1, 2):
        fleet = Fleet(
            [Node(FixedCost(0.1), 5_000, [], Policy(max_num_batched_tokens=2_048)) for _ in range(n)], "round-robin"
        )

        def start(f):
            for _ in range(n):
                f.at(0.0, lambda now: f.issue(Turn(Chain(), 10_000, 1)))

        with pytest.raises(
            ConfigError, match="a turn of 10000 prompt and 1 output tokens does not fit the GPU KV cache of 4992"
        ):
            fleet.run(start, 60)


def test_the_table_names_the_router_of_a_fleet():
    r = runner.invoke(
        app,
        [
            "simulate",
            "--config",
            "gpu=seed-testbed:HBM",
            "--gpu-kv",
            "200K",
            "--duration",
            "2m",
            "--nodes",
            "2",
            "--router",
            "least-loaded",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "Fleets behind a least-loaded router" in r.stdout


@pytest.mark.parametrize("router, nodes", [("affinity", 1), ("affinity", 2), ("round-robin", 2)])
def test_progress_follows_simulated_time_and_changes_nothing(router, nodes):
    """A configuration reports the share of its simulated time done (over its nodes), rising to
    the end; the result is the same without the reports."""
    sc = Scenario(duration_s=600, rate_per_min=5, gpu_kv_tokens=200_000, router=router)
    cfg = parse_config("gpu=seed-testbed:HBM")
    shares = []
    watched = run_config(sc, cfg, nodes=nodes, on_progress=shares.append)
    assert watched == run_config(sc, cfg, nodes=nodes)
    assert shares == sorted(shares) and len(shares) > 20
    assert 0 < shares[0] < 0.1 and shares[-1] > 0.9
