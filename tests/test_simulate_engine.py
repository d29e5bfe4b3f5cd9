"""The serving model against hand-computed oracles: TTFTs, conservation, preemption, tier fills,
and the replay's hit ratios when steps cost nothing."""

from __future__ import annotations

import pytest

from kvtrace.errors import BadTraceInput, ConfigError
from kvtrace.replay import replay
from kvtrace.replay.catalog import resolve_model
from kvtrace.replay.tiers import tiers_from_dict
from kvtrace.simulate.cost import StepCost, load_gpu
from kvtrace.simulate.engine import Chain, Head, LowerTier, Node, Policy, Turn
from kvtrace.simulate.sources import SynthSource
from kvtrace.synth.config import preset

from tests.simulate_support import FixedCost, trace_of

MODEL = resolve_model("MiniMax-M2.7:fp8")
BPT = MODEL.bytes_per_token


def _script(turns_at):
    """A client sending pre-built turns at fixed times (open loop)."""

    def start(node):
        for t, turn in turns_at:
            node.at(t, lambda now, turn=turn: node.issue(turn))

    return start


def test_one_turn_ttft_and_completion_are_the_step_count():
    node = Node(FixedCost(0.1), 100_000, [], Policy(max_num_batched_tokens=8192), keep_turns=True)
    t = Turn(Chain(), 20_000, 10)
    m = node.run(_script([(0.0, t)]), 60)
    # 8192 + 8192 + 3616 prefill tokens: three steps, the first token at 0.3 s; 9 more decode steps
    assert t.first_t == pytest.approx(0.3)
    assert t.done_t == pytest.approx(1.2)
    assert m.prompt_tok.sum() == 20_000 and m.output_tok.sum() == 10
    assert m.computed_tok.sum() == 20_000 + 10
    assert m.busy_s.sum() == pytest.approx(1.2)


def _turn_then_its_next(node: Node, first: tuple[int, int], gap_s: float, then: tuple[int, int]):
    """One session's turn of ``first`` (prompt, output tokens) at t = 0, and its next turn of
    ``then`` ``gap_s`` after the first completes: the node's metrics after 60 s."""
    ch = Chain()
    one = Turn(ch, *first)

    def start(n):
        n.at(0.0, lambda now: n.issue(one))
        one.on_done = lambda t: n.at(t + gap_s, lambda now: n.issue(Turn(ch, *then)))

    return node.run(start, 60)


def test_a_continuing_turn_hits_its_previous_blocks_and_only_prefills_the_new_tokens():
    node = Node(FixedCost(0.1), 100_000, [], Policy(), keep_turns=True)
    m = _turn_then_its_next(node, (20_000, 10), 5.0, (20_510, 3))
    second = m.turns[1]
    # cached: prompt + output - 1 = 20,009 tokens -> 1,250 full blocks of 16 = 20,000 tokens
    assert second.hits == [20_000]
    assert second.first_t - second.issue_t == pytest.approx(0.1)
    assert second.done_t == pytest.approx(1.2 + 5.0 + 0.3)


def test_decode_batches_share_steps_and_fcfs_admission_queues_behind_max_num_seqs():
    node = Node(FixedCost(0.05), 100_000, [], Policy(max_num_seqs=2), keep_turns=True)
    turns = [Turn(Chain(), 100, 4) for _ in range(3)]
    node.run(_script([(0.0, t) for t in turns]), 60)
    a, b, c = turns
    # a and b prefill together in step 1 (first tokens at 0.05), decode 3 more steps -> done at 0.2
    assert a.first_t == pytest.approx(0.05) and b.first_t == pytest.approx(0.05)
    assert a.done_t == pytest.approx(0.2) and b.done_t == pytest.approx(0.2)
    # c waits for a slot: admitted at 0.2, first token one step later
    assert c.admit_t == pytest.approx(0.2) and c.first_t == pytest.approx(0.25)


def test_preemption_by_recompute_when_blocks_run_out_and_every_token_is_still_served():
    node = Node(FixedCost(0.01), 1_024, [], Policy(block_tokens=16), keep_turns=True)
    turns = [Turn(Chain(), 400, 300) for _ in range(2)]
    m = node.run(_script([(0.0, t) for t in turns]), 600)
    assert m.preemptions >= 1
    assert all(t.done_t is not None for t in turns)
    assert m.output_tok.sum() == 600
    assert m.prompt_tok.sum() == 800
    # the preempted one recomputed its prompt and what it had generated
    assert m.computed_tok.sum() > 800 + 600
    assert node.gpu.pinned == 0


def test_a_prompt_larger_than_the_gpu_cache_is_a_clear_error():
    node = Node(FixedCost(0.01), 1_000, [], Policy())
    with pytest.raises(ConfigError, match="does not fit the GPU KV cache"):
        node.run(_script([(0.0, Turn(Chain(), 5_000, 1))]), 10)


def test_write_through_fills_a_tier_at_the_step_of_the_first_eviction():
    dram = LowerTier("DRAM", 4 * 1024, read_gbps=100, write_gbps=100)
    node = Node(FixedCost(0.1), 100_000, [dram], Policy(store_blocks=False), keep_turns=True)
    turns = [Turn(Chain(), 1024, 1) for _ in range(6)]
    m = node.run(_script([(10.0 * i, t) for i, t in enumerate(turns)]), 100)
    # each prompt stores 4 new chunks of 256: four fill the tier, the fifth's store evicts
    assert node.res[0].first_full_at == pytest.approx(40.1)
    assert m.write["new"].sum() == 6 * 1024 * BPT
    assert node.res[0].used == 4 * 1024


def test_a_lower_tier_hit_is_loaded_blocking_the_step_and_written_back():
    dram = LowerTier("DRAM", 4_096, read_gbps=100, write_gbps=100)
    nvme = LowerTier("NVMe", 10_000_000, read_gbps=10, write_gbps=10, latency_s=0.001)
    node = Node(FixedCost(0.1), 5_000, [dram, nvme], Policy(store_blocks=False), keep_turns=True)
    ch = Chain()
    first = Turn(ch, 4_000, 1)
    evictor = Turn(Chain(), 4_990, 1)  # pushes the first chain out of the GPU and the DRAM

    def start(n):
        n.at(0.0, lambda now: n.issue(first))
        n.at(10.0, lambda now: n.issue(evictor))
        n.at(20.0, lambda now: n.issue(Turn(ch, 4_300, 1)))

    m = node.run(start, 60)
    again = m.turns[2]
    assert again.hits == [0, 0, 3_840]  # 15 full chunks of 256 of the 4,000-token prompt, from NVMe
    load = 3_840 * BPT / 10e9 + 0.001
    assert again.first_t - again.issue_t == pytest.approx(0.1 + load)
    # the 4,096 tokens of full chunks go to the DRAM: 3,840 written back from NVMe, 256 computed;
    # before, the first prompt's 3,840 and the evictor's 4,864 (written, though only 4,096 fit)
    assert m.write["write_back"][0].sum() == 3_840 * BPT
    assert m.write["new"][0].sum() == (3_840 + 4_864 + 256) * BPT


def test_overlapped_loads_delay_only_the_loading_request():
    nvme = LowerTier("NVMe", 10_000_000, read_gbps=1, write_gbps=10)
    node = Node(FixedCost(0.1), 5_000, [nvme], Policy(load="overlap", store_blocks=False), keep_turns=True)
    ch = Chain()
    first = Turn(ch, 4_000, 1)
    evictor = Turn(Chain(), 4_990, 1)
    other = Turn(Chain(), 200, 1)

    def start(n):
        n.at(0.0, lambda now: n.issue(first))
        n.at(10.0, lambda now: n.issue(evictor))
        n.at(20.0, lambda now: n.issue(Turn(ch, 4_300, 1)))
        n.at(20.0, lambda now: n.issue(other))

    m = node.run(start, 60)
    again = [t for t in m.turns if t.chain is ch][1]
    load = 3_840 * BPT / 1e9
    assert again.ready_t - again.admit_t == pytest.approx(load)
    assert other.first_t - other.issue_t == pytest.approx(0.1)  # not held up by the load


def test_the_shared_head_is_pinned_once_and_hit_by_other_chains():
    node = Node(FixedCost(0.1), 100_000, [], Policy(), keep_turns=True)
    head = Head("sys", 10_000)
    a, b = Turn(Chain(head), 10_500, 1), Turn(Chain(head), 10_700, 1)
    m = node.run(_script([(0.0, a), (5.0, b)]), 60)
    assert b.hits == [10_000]
    assert m.computed_tok.sum() == 10_500 + 700 + 2


def test_token_conservation_on_the_seed_workload():
    cost = StepCost(MODEL, load_gpu("RTX-PRO-6000"), 4, 0.5, 0.56)
    node = Node(cost, 400_000, [], Policy(), keep_turns=True)
    src = SynthSource(preset("seed-study", days=600 / 86400), 600)
    m = node.run(src, 20_000)  # arrivals for 10 min, then everything drains
    done = [t for t in m.turns]
    assert done and all(t.done_t is not None for t in done)
    assert m.prompt_tok.sum() == sum(t.prompt for t in done)
    assert m.output_tok.sum() == sum(t.output for t in done)
    hit = sum(t.hits[0] for t in done)
    assert m.computed_tok.sum() >= sum(t.prompt + t.output for t in done) - hit
    assert node.gpu.pinned == 0 and not node.running and not node.waiting


@pytest.mark.parametrize("tier_mode", ["inclusive", "exclusive"])
def test_zero_step_cost_gives_the_replays_per_tier_hit_ratios(tier_mode):
    """One model, two views: with steps that take no time, requests happen at their issue times
    (open loop) and the tiers see the replay's LRU stack (exclusive: depth bands of one stack,
    demote on evict, which is what spilling on eviction and moving hits up builds). What remains
    different: a running request pins the KV it is writing, its partial last block included, for
    the instant it runs; the replay's stack holds whole prompt blocks only. One-token answers keep
    that to a few blocks."""
    bs = 256
    caps = {"HBM": 300_000, "DRAM": 1_000_000, "NVMe": 3_000_000}
    lower = [LowerTier(n, c, read_gbps=100, write_gbps=100) for n, c in caps.items() if n != "HBM"]
    cost = StepCost(MODEL, load_gpu("H100"), 8, zero=True)
    node = Node(
        cost,
        caps["HBM"],
        lower,
        Policy(block_tokens=bs, chunk_tokens=bs, cache_output=False, tier_mode=tier_mode),
        keep_turns=True,
    )
    cfg = preset(
        "seed-study",
        seed=3,
        days=3600 / 86400,
        output_tokens=(1, 1),
        code_block_prob=0.0,
        jitter_tokens=0,
        subagent_answer_tokens=(1, 1),
        compact_summary_tokens=(1, 1),
    )
    m = node.run(SynthSource(cfg, 3600), 4 * 3600)
    turns = sorted(m.turns, key=lambda t: t.seq)
    assert len(turns) > 1000
    ts = tiers_from_dict(
        {
            "name": "t",
            "mode": tier_mode,
            "compute": {"prefill_tokens_per_s": 1e4},
            "tier": [{"name": n, "capacity": str(c), "read_gbps": 1, "write_gbps": 1} for n, c in caps.items()],
        }
    )
    res = replay(trace_of(turns, bs), capacities=[None], ttls=[None], model=MODEL, tiers=ts)
    total = sum(t.prompt for t in turns)
    want = [t["hit_tokens"] / total for t in res.tiers["tiers"]]
    got = [float(x) / total for x in m.hit_tokens]
    assert got == pytest.approx(want, abs=2e-4)
    assert want[1] > 0.01 and want[2] > 0.001  # every tier serves hits: the test can fail


def test_with_unlimited_gpu_memory_the_simulator_and_the_replay_agree_exactly():
    """Nothing is ever evicted: the two views count the same hits, to the token."""
    bs = 256
    cost = StepCost(MODEL, load_gpu("H100"), 8, zero=True)
    cfg = preset(
        "seed-study",
        seed=3,
        days=3600 / 86400,
        output_tokens=(1, 1),
        code_block_prob=0.0,
        jitter_tokens=0,
        subagent_answer_tokens=(1, 1),
        compact_summary_tokens=(1, 1),
    )
    node = Node(cost, 10**9, [], Policy(block_tokens=bs, chunk_tokens=bs, cache_output=False), keep_turns=True)
    m = node.run(SynthSource(cfg, 3600), 4 * 3600)
    turns = sorted(m.turns, key=lambda t: t.seq)
    res = replay(trace_of(turns, bs), capacities=[None], ttls=[None])
    assert int(m.hit_tokens[0]) == res.grid[0]["hit_tokens"]


@pytest.mark.parametrize("store, new, restore", [("missing", 1024 + 512, 0), ("all", 1024 + 512, 1024)])
def test_writes_by_cause_under_each_store_policy(store, new, restore):
    dram = LowerTier("DRAM", 1_000_000, read_gbps=100, write_gbps=100)
    node = Node(FixedCost(0.1), 100_000, [dram], Policy(store=store, store_blocks=False), keep_turns=True)
    m = _turn_then_its_next(node, (1024, 1), 1.0, (1536, 1))
    # the second turn hits 1,024 tokens on the GPU and computes 512; the DRAM had the first 1,024
    assert m.turns[1].hits == [1024, 0]
    assert m.write["new"].sum() == new * BPT
    assert m.write["restore"].sum() == restore * BPT
    assert m.write["write_through"].sum() == 0 and m.write["write_back"].sum() == 0


def test_a_diverging_prompt_cuts_what_the_tiers_hold_of_its_chain():
    dram = LowerTier("DRAM", 1_000_000, read_gbps=100, write_gbps=100)
    node = Node(FixedCost(0.1), 100_000, [dram], Policy(store_blocks=False), keep_turns=True)
    ch = Chain()
    first = Turn(ch, 4096, 1)

    def start(n):
        n.at(0.0, lambda now: n.issue(first))
        # only the first 1,000 tokens are still the same conversation (an edited history)
        first.on_done = lambda t: n.at(t + 1.0, lambda now: n.issue(Turn(ch, 3000, 1, keep=1000)))

    m = node.run(start, 60)
    assert m.turns[1].hits == [992, 0]  # whole GPU blocks of the kept 1,000 tokens
    assert node.res[0].get(ch) == 2816  # DRAM cut to 3 chunks (768), then the new prompt's 11 (2,816)


def test_a_turn_sent_during_a_step_is_timed_from_when_it_was_sent():
    node = Node(FixedCost(0.1), 100_000, [], Policy(), keep_turns=True)
    busy, late = Turn(Chain(), 300, 1), Turn(Chain(), 50, 1)
    node.run(_script([(0.0, busy), (0.05, late)]), 60)
    # sent at 0.05 while the first step ran; admitted at its end (0.1), first token one step later
    assert late.issue_t == pytest.approx(0.05)
    assert late.admit_t == pytest.approx(0.1)
    assert late.first_t - late.issue_t == pytest.approx(0.15)


def _two_chains_back_from_nvme(policy: Policy, b_tokens: int, again_tokens: int) -> list:
    """Chains a (2,000 tokens) and b (``b_tokens``) go to the GPU, a third prompt evicts both to
    NVMe, then both come back at t = 20 s with ``again_tokens`` each: those two turns."""
    nvme = LowerTier("NVMe", 10_000_000, read_gbps=10, write_gbps=10)
    node = Node(FixedCost(0.1), 5_000, [nvme], policy, keep_turns=True)
    a, b = Chain(), Chain()

    def start(n):
        n.at(0.0, lambda now: n.issue(Turn(a, 2_000, 1)))
        n.at(1.0, lambda now: n.issue(Turn(b, b_tokens, 1)))
        n.at(10.0, lambda now: n.issue(Turn(Chain(), 4_990, 1)))  # evicts both from the GPU
        n.at(20.0, lambda now: (n.issue(Turn(a, again_tokens, 1)), n.issue(Turn(b, again_tokens, 1))))

    return node.run(start, 60).turns[3:]


def test_blocking_loads_admitted_in_one_step_share_the_link():
    again = _two_chains_back_from_nvme(Policy(store_blocks=False), 2_000, 2_300)
    assert [t.hits for t in again] == [[0, 1_792], [0, 1_792]]
    both = 2 * 1_792 * BPT / 10e9  # one link, both loads: the step waits for all bytes
    for t in again:
        assert t.first_t - t.issue_t == pytest.approx(0.1 + both)


def test_the_hardware_catalog_and_the_step_cost():
    from kvtrace.simulate.cost import gpu_names

    assert {"RTX-PRO-6000", "H100", "H200", "B200", "GH200"} <= set(gpu_names())
    cost = StepCost(MODEL, load_gpu("rtx pro 6000"), 4, 0.5, 0.5)
    # a stretch of decode steps costs what the same steps cost one by one (one formula: to the bit)
    for b, ctx in ((19, 19 * 38_000), (2, 100), (5, 1_000_000), (200, 5_000_000)):
        many = cost.decode_steps(b, ctx, 5)
        assert many.tolist() == [cost.step(b, ctx + b * j, []) for j in range(5)]
    # a measured decode step gives back the decode efficiency that produces it
    e = cost.fit_decode_efficiency(19, 38_000, 0.052)
    assert StepCost(MODEL, cost.gpu, 4, 0.5, e).step(19, 19 * 38_000, []) == pytest.approx(0.052)
    # prefill slows with context (attention over it); TP adds all-reduce per token
    assert cost.prefill_s_per_token(40_000) > cost.prefill_s_per_token(0)
    solo = StepCost(MODEL, cost.gpu, 1, 0.5, 0.5)
    assert float(solo.allreduce_s(1000)) == 0.0 and float(cost.allreduce_s(1000)) > 0
    with pytest.raises(ConfigError, match="unknown GPU"):
        load_gpu("TPU")


def test_overlapped_loads_in_flight_together_share_the_link_equally():
    ta, tb = _two_chains_back_from_nvme(Policy(load="overlap", store_blocks=False), 2_300, 2_500)
    assert [ta.hits, tb.hits] == [[0, 1_792], [0, 2_048]]
    x, y = 1_792 * BPT, 2_048 * BPT
    # both at half the bandwidth until the smaller finishes, then the rest of the larger at full
    assert ta.ready_t - ta.admit_t == pytest.approx(2 * x / 10e9)
    assert tb.ready_t - tb.admit_t == pytest.approx(2 * x / 10e9 + (y - x) / 10e9)


def test_metrics_drop_a_warm_up_from_series_records_and_totals():
    from kvtrace.simulate.engine import Metrics

    m = Metrics(300.0, ["DRAM"])
    m.prompt_tok[:] = [1, 2, 3, 4, 5]
    for k, name in enumerate(("output_tok", "computed_tok", "busy_s", "steps", "running", "waiting")):
        getattr(m, name)[:] = [10 * k + b for b in range(5)]
    m.read[0, :] = [10, 20, 30, 40, 50]
    m.write["new"][0, :] = [5, 6, 7, 8, 9]
    m.hit_tokens += [100, 10]
    m.prompt_total, m.preemptions = 200, 3
    m.ttft = [("new", 30.0, 1.0, 0.0, 0.5, 0.0), ("continuing", 120.0, 2.0, 0.1, 0.2, 3.0)]
    m.mark()
    m.hit_tokens += [7, 1]
    m.prompt_total, m.preemptions = 220, 4
    m.ttft.append(("resumed", 200.0, 0.0, 0.0, 1.0, 0.0))
    m.drop_head(120.0)
    assert m.n == 3 and list(m.prompt_tok) == [3, 4, 5] and list(m.read[0]) == [30, 40, 50]
    for k, name in enumerate(("output_tok", "computed_tok", "busy_s", "steps", "running", "waiting")):
        assert list(getattr(m, name)) == [10 * k + b for b in (2, 3, 4)], name
    assert list(m.write["new"][0]) == [7, 8, 9] and m.occupancy.shape == (2, 3)
    assert list(m.hit_tokens) == [7, 1] and (m.prompt_total, m.preemptions) == (20, 1)
    assert m.ttft == [("continuing", 0.0, 2.0, 0.1, 0.2, 3.0), ("resumed", 80.0, 0.0, 0.0, 1.0, 0.0)]


def test_kv_cache_tester_think_times_and_sub_agents_as_kv_cache_tester_replays_them(tmp_path):
    import json

    from kvtrace.simulate.sources import TesterSource, read_tester

    def req(n, think, out=10):
        return {"t": 0.0, "type": "n", "in": n, "out": out, "hash_ids": list(range(n // 64)), "think_time": think}

    conv = {
        "block_size": 64,
        "requests": [
            req(1_000, 0.0),
            req(1_100, 30.0),  # its think time: 30 s after the request before it completed
            {"type": "subagent", "t": 40.0, "requests": [req(500, 0.0), req(600, 5.0)]},
            {"type": "subagent", "t": 41.0, "requests": [req(700, 0.0)]},
            req(1_200, 3.0),  # waits for both sub-agents, longer than its think time
            req(1_300, 400.0),  # idle longer than the resume gap
            {"type": "subagent", "t": 900.0, "requests": [req(800, 0.0)]},
            req(1_400, 50.0),  # its think time outlasts the sub-agent
        ],
    }
    path = tmp_path / "trace_0001.json"
    path.write_text(json.dumps(conv))
    src = TesterSource([path], 1.0, 3600.0)
    node = Node(FixedCost(0.1), 100_000, [], Policy(), keep_turns=True)
    m = node.run(lambda n: n.at(0.0, src._start, n, read_tester(path)), 3600)
    by = {t.prompt: t for t in m.turns}
    assert sorted(by) == [500, 600, 700, 800, 1_000, 1_100, 1_200, 1_300, 1_400]
    main0, main1, a0, a1, b0, main2, main3 = (by[k] for k in (1_000, 1_100, 500, 600, 700, 1_200, 1_300))
    assert main0.issue_t == 0.0 and main1.issue_t == pytest.approx(main0.done_t + 30.0)
    assert a0.issue_t == b0.issue_t == pytest.approx(main1.done_t)  # started together
    assert a1.issue_t == pytest.approx(a0.done_t + 5.0)
    assert main2.issue_t == pytest.approx(max(a1.done_t, b0.done_t))
    assert main2.issue_t > main1.done_t + 3.0
    assert main3.issue_t == pytest.approx(main2.done_t + 400.0)
    assert by[800].issue_t == pytest.approx(main3.done_t) and by[800].done_t < main3.done_t + 50.0
    assert by[1_400].issue_t == pytest.approx(main3.done_t + 50.0)
    assert [t.cohort for t in (main0, main1, a0, a1, b0, main2, main3)] == [
        "new",
        "continuing",
        "continuing",
        "continuing",
        "continuing",
        "continuing",
        "resumed",
    ]
    assert src.sessions == 1


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["requests"][1]["requests"][0].pop("in"), "field 'in': request 1.0: lacks it"),
        (lambda c: c["requests"][0].update(hash_ids=None), "field 'hash_ids': request 0: must be a list"),
        (lambda c: c["requests"][0].update(out=True), "field 'out': request 0: must be a whole number"),
        (lambda c: c["requests"][2].update(think_time="abc"), "field 'think_time': request 2: must be seconds"),
        (lambda c: c["requests"][2].update(think_time=-1), "field 'think_time': request 2: must be seconds"),
        (
            lambda c: c["requests"][1].update(requests={}),
            "field 'requests': request 1: a subagent entry's requests must be a list",
        ),
        (lambda c: c.update(block_size="64"), "field 'block_size': block_size must be a whole number"),
    ],
)
def test_bad_kv_cache_tester_traces_name_the_file_request_and_field(tmp_path, change, message):
    import json

    from kvtrace.simulate.sources import read_tester

    def req(n, **kw):
        return {"type": "n", "in": n, "out": 5, "hash_ids": [1, 2], "think_time": 1.0, **kw}

    conv = {"block_size": 64, "requests": [req(100), {"type": "subagent", "requests": [req(50)]}, req(120)]}
    path = tmp_path / "trace_0009.json"
    path.write_text(json.dumps(conv))
    read_tester(path)
    change(conv)
    path.write_text(json.dumps(conv))
    with pytest.raises(BadTraceInput, match=message) as e:
        read_tester(path)
    assert "trace_0009.json" in str(e.value)


def test_a_missing_think_time_is_the_gap_less_the_previous_api_time(tmp_path):
    import json

    from kvtrace.simulate.sources import read_tester

    def req(t, api=None, **kw):
        r = {"t": t, "in": 100, "out": 5, "hash_ids": [1]}
        return {**r, **({} if api is None else {"api_time": api}), **kw}

    conv = {
        "requests": [
            req(0.0, 4.0, think_time=0.0),
            req(30.0, 6.0),  # 30 - 0 - 4
            {"type": "subagent", "requests": [req(0.0, 1.0, think_time=0.0)]},
            req(50.0, "abc"),  # 50 - 30 - 6, past the sub-agent entry
            req(70.0),  # a previous api_time that is not a number counts as none: 70 - 50
        ]
    }
    path = tmp_path / "trace_0001.json"
    path.write_text(json.dumps(conv))
    got = read_tester(path)["requests"]
    assert [got[k]["think_time"] for k in (1, 3, 4)] == [26.0, 14.0, 20.0]


def test_a_missing_think_time_is_the_gap_the_trace_records():
    """trace_0074's second request has no think_time: its t less the first's t and api_time (none)."""
    from pathlib import Path

    from kvtrace.simulate.sources import read_tester

    conv = read_tester(Path(__file__).parent / "fixtures" / "kv-cache-tester" / "trace_0074.json.gz")
    a, b = conv["requests"][:2]
    assert "think_time" in b and b["think_time"] == pytest.approx(b["t"] - a["t"] - a.get("api_time", 0.0)) == 18.0


def test_kv_cache_tester_requests_of_either_type_extend_one_chain():
    """In trace_0112 a streaming request (type s) extends the non-streaming ones around it: it
    hits their prefix, and the next one hits it."""
    from pathlib import Path

    from kvtrace.simulate.sources import TesterSource, read_tester

    path = Path(__file__).parent / "fixtures" / "kv-cache-tester" / "trace_0112.json.gz"
    conv = read_tester(path)
    assert [r["type"] for r in conv["requests"]].count("s") == 1
    src = TesterSource([path], 1.0, 36_000.0)
    node = Node(FixedCost(0.01), 2_000_000, [], Policy(), keep_turns=True)
    m = node.run(lambda n: n.at(0.0, src._start, n, conv), 36_000)
    turns = sorted(m.turns, key=lambda t: t.issue_t)
    assert [t.prompt for t in turns] == [r["in"] for r in conv["requests"]]
    for before, t in zip(turns, turns[1:]):
        assert t.hits[0] >= before.prompt - 64, (before.prompt, t.prompt, t.hits)


def test_a_step_that_preempts_admits_nothing_as_vllm_v1():
    # four requests on a small cache: the third admitted is preempted twice for the others' blocks.
    # Admitting in the step that preempted would take the victim straight back, to be preempted
    # again the next step (three preemptions); vLLM V1 admits nothing in such a step.
    node = Node(FixedCost(0.01), 2_048, [], Policy(block_tokens=16, max_num_batched_tokens=512), keep_turns=True)
    turns = [Turn(Chain(), p, o) for p, o in ((337, 281), (451, 92), (612, 68), (881, 176))]
    m = node.run(_script(list(zip((0.048, 0.083, 0.114, 0.13), turns))), 60)
    assert m.preemptions == 2
    assert all(t.done_t is not None for t in turns)
    assert m.prompt_tok.sum() == 337 + 451 + 612 + 881
    assert node.gpu.pinned == 0


def test_a_turn_whose_prompt_and_output_exceed_the_gpu_cache_is_refused_when_sent():
    node = Node(FixedCost(0.01), 1_024, [], Policy(block_tokens=16))
    with pytest.raises(ConfigError, match="791 prompt and 256 output tokens does not fit the GPU KV cache of 1024"):
        node.run(_script([(0.0, Turn(Chain(), 791, 256))]), 10)


@pytest.mark.parametrize("shared", [True, False])
def test_a_sessions_first_turn_hits_the_head_only_when_heads_are_shared(shared):
    cost = StepCost(MODEL, load_gpu("RTX-PRO-6000"), 4, 0.5, 0.56)
    node = Node(cost, 400_000, [], Policy(), keep_turns=True)
    src = SynthSource(
        preset("seed-study", days=600 / 86400, shared_heads=shared, subagent_prob=0.0, model_switch_prob=0.0), 600
    )
    m = node.run(src, 20_000)
    first = [t for t in m.turns if t.cohort == "new"]
    assert len(first) == src.sessions > 10
    hit = [t.hits[0] for t in first]
    if shared:  # one head per model: after its first session, every session's first turn hits it
        assert sum(h > 0 for h in hit) >= len(first) - len({t.label.model for t in first})
    else:
        assert hit == [0] * len(first)
        assert len(src.heads) == len(first)
