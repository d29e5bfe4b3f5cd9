"""Offload tier modes: inclusive (write-through to every tier, LMCache's) against exclusive (a
chunk lives in one tier: spilled down on eviction, moved up to the GPU on a hit)."""

from __future__ import annotations

import pytest

from kvtrace.replay.catalog import resolve_model
from kvtrace.errors import ConfigError
from kvtrace.simulate.cost import StepCost, load_gpu
from kvtrace.simulate.engine import Chain, LowerTier, Node, Policy, Turn
from kvtrace.simulate.sources import SynthSource
from kvtrace.synth.config import preset

from tests.simulate_support import FixedCost

MODEL = resolve_model("MiniMax-M2.7:fp8")
BPT = MODEL.bytes_per_token


def _segments(node: Node, k: int) -> dict:
    """Tier ``k``'s segments: object -> (start, end) in tokens of that object."""
    st = node.seg_start[k]
    return {obj: (st[obj], st[obj] + n) for obj, n in node.res[k].lru.items()}


def test_exclusive_spill_against_a_hand_computed_oracle():
    """GPU 1,024 tokens, DRAM 1,024, NVMe 4,096; chunks of 256, blocks of 16; one-token answers."""
    dram = LowerTier("DRAM", 1_024, read_gbps=100, write_gbps=100)
    nvme = LowerTier("NVMe", 4_096, read_gbps=10, write_gbps=10)
    node = Node(FixedCost(0.1), 1_024, [dram, nvme], Policy(tier_mode="exclusive", store_blocks=False), keep_turns=True)
    a, b, c, d, e = (Chain() for _ in range(5))
    seen = {}

    def start(f):
        for i, ch in enumerate((a, b, c, d, e)):
            f.at(10.0 * i, lambda now, ch=ch: f.issue(Turn(ch, 512, 1)))
        f.at(45.0, lambda now: seen.update(dram=_segments(node, 0), nvme=_segments(node, 1)))
        f.at(50.0, lambda now: f.issue(Turn(a, 600, 1)))
        f.at(55.0, lambda now: seen.update(dram2=_segments(node, 0), nvme2=_segments(node, 1)))
        f.at(60.0, lambda now: f.issue(Turn(e, 600, 1)))

    m = node.run(start, 100)
    # c evicts a to DRAM, d evicts b to DRAM (now full), e evicts c: DRAM makes room by spilling
    # its least recent, a, to NVMe
    assert seen["dram"] == {b: (0, 512), c: (0, 512)}
    assert seen["nvme"] == {a: (0, 512)}
    a2, e2 = m.turns[5], m.turns[6]
    # a's whole prompt is in NVMe: read from there and moved up (NVMe no longer holds it). Room for
    # its 600 tokens: d leaves the GPU (to DRAM, which spills b to NVMe), then 96 tokens of e
    # (e's GPU copy ends at 416: its chunk [256, 512) goes to DRAM whole, which spills c's tail)
    assert a2.hits == [0, 0, 512]
    assert seen["dram2"] == {c: (0, 256), d: (0, 512), e: (256, 512)}
    assert seen["nvme2"] == {b: (0, 512), c: (256, 512)}
    # e: 416 tokens on the GPU, the rest of its chunk [256, 512) in DRAM. Room first: a's GPU tail
    # [424, 592) goes, as the chunk [256, 512), to the full DRAM, which spills c's [0, 256) to
    # NVMe (joining c's [256, 512) there); then e's chunk moves up, out of DRAM
    assert e2.hits == [416, 96, 0]
    assert _segments(node, 0) == {d: (0, 512), a: (256, 512)}
    assert _segments(node, 1) == {b: (0, 512), c: (0, 512)}
    spill = m.write["spill"].sum(axis=1) / BPT
    assert spill.tolist() == [512 * 4 + 256 + 256, 512 * 2 + 256 + 256]
    for cause in ("new", "write_through", "write_back", "restore"):
        assert m.write[cause].sum() == 0
    assert m.read.sum(axis=1).tolist() == [96 * BPT, 512 * BPT]


def test_inclusive_mode_writes_every_prompt_to_every_tier_and_never_spills():
    dram = LowerTier("DRAM", 1_024, read_gbps=100, write_gbps=100)
    nvme = LowerTier("NVMe", 4_096, read_gbps=10, write_gbps=10)
    node = Node(FixedCost(0.1), 1_024, [dram, nvme], Policy(store_blocks=False), keep_turns=True)
    chains = [Chain() for _ in range(5)]

    def start(f):
        for i, ch in enumerate(chains):
            f.at(10.0 * i, lambda now, ch=ch: f.issue(Turn(ch, 512, 1)))

    m = node.run(start, 100)
    assert (m.write["new"].sum(axis=1) / BPT).tolist() == [5 * 512, 5 * 512]
    assert m.write["spill"].sum() == 0
    assert node.res[0].lru == {chains[3]: 512, chains[4]: 512}  # the two most recent
    assert node.res[1].lru == {ch: 512 for ch in chains}


def _synth_run(mode: str, check, caps=(100_000, 200_000, 600_000)):
    cost = StepCost(MODEL, load_gpu("H100"), 8)
    lower = [
        LowerTier("DRAM", caps[1], read_gbps=50, write_gbps=50),
        LowerTier("NVMe", caps[2], read_gbps=10, write_gbps=5),
    ]
    node = Node(cost, caps[0], lower, Policy(tier_mode=mode))
    src = SynthSource(preset("seed-study", seed=1, days=1800 / 86400), 1800)
    checks = []

    def start(f):
        src(f)
        for t in range(60, 1800, 60):
            f.at(float(t), lambda now: checks.append(check(node)))

    m = node.run(start, 1800)
    assert len(checks) == 29
    return node, m, checks


def test_exclusive_tiers_hold_each_chunk_once():
    """At every minute: each offload tier's occupancy is the sum of its objects' segments, an
    object's segments in DRAM and NVMe never overlap, so the tiers' occupancies add up to the
    distinct chunks they cache; every segment is in whole chunks."""

    def check(node):
        dram, nvme = _segments(node, 0), _segments(node, 1)
        for k, segs in enumerate((dram, nvme)):
            assert node.res[k].used == sum(e - s for s, e in segs.values()) <= node.res[k].capacity
            assert all(s % 256 == 0 and e % 256 == 0 and e > s for s, e in segs.values())
        distinct = 0
        for obj in set(dram) | set(nvme):
            chunks = set()
            for segs in (dram, nvme):
                if obj in segs:
                    chunks |= set(range(segs[obj][0] // 256, segs[obj][1] // 256))
            distinct += 256 * len(chunks)
        assert node.res[0].used + node.res[1].used == distinct
        return node.res[0].used, node.res[1].used

    node, m, checks = _synth_run("exclusive", check)
    assert max(n for _, n in checks) > 0  # the NVMe holds spilled chunks: the test can fail
    assert m.write["spill"][1].sum() > 0 and m.write["new"].sum() == 0


def test_inclusive_tiers_each_hold_a_superset_of_the_smaller_tier_above():
    """Write-through with write-back: the same chunks go to DRAM and NVMe in the same order, so the
    larger NVMe (an LRU with the same accesses) holds at least every object's DRAM prefix."""

    def check(node):
        dram, nvme = node.res[0].lru, node.res[1].lru
        assert all(nvme.get(obj, 0) >= n for obj, n in dram.items())
        return sum(dram.values()), sum(nvme.values())

    node, m, checks = _synth_run("inclusive", check)
    assert checks[-1][1] > checks[-1][0] > 0
    assert m.write["spill"].sum() == 0 and m.write["new"][1].sum() > 0


@pytest.mark.parametrize("policy", [dict(store="all"), dict(write_back=False), dict(tier_mode="spill")])
def test_exclusive_mode_rejects_switches_it_cannot_honour(policy):
    mode = {"tier_mode": "exclusive"} if "tier_mode" not in policy else {}
    with pytest.raises(ConfigError):
        Policy(**policy, **mode).validate()
