"""Tier traffic against a block-by-block hierarchy simulation; presets, capacities, endurance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import load_model
from kvtrace.replay.distances import NO_TTL, compute_distances, ts_us
from kvtrace.replay.tiers import Drives, ResolvedTier, Tier, TierSet, load_tiers, preset_names, resolve, tiers_from_dict
from kvtrace.replay.traffic import tier_traffic

from tests.replay_oracle import BS, prefix_trace, simulate_tiers

BPT = 10  # bytes per token of a toy model: a block is 40 bytes


def _resolved(caps):
    return [
        ResolvedTier(Tier(name=f"t{k}", read_gbps=1.0, write_gbps=1.0), c, c * BS * BPT, BS * BPT)
        for k, c in enumerate(caps)
    ]


@st.composite
def small_request_trace(draw):
    """Prefix-closed traces whose requests are no longer than the smallest tier (3 blocks)."""
    trace = draw(prefix_trace())
    return trace if np.diff(trace.offsets).max(initial=0) <= 3 else None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    small_request_trace().filter(lambda t: t is not None),
    st.sampled_from(["exclusive", "inclusive"]),
    st.lists(st.integers(3, 9), min_size=1, max_size=3),
    st.sampled_from([None, 2000, 5000]),
    st.sampled_from(["numpy", "numba"]),
)
def test_tier_traffic_equals_a_block_by_block_hierarchy(trace, mode, caps, ttl_ms, engine):
    if mode == "inclusive":
        caps = sorted(caps)
    ttl = NO_TTL if ttl_ms is None else ttl_ms * 1000
    dist = compute_distances(trace, [ttl], engine=engine)
    tiers, hit_b, hit_t, _ = tier_traffic(dist, ts_us(trace), trace.input_length, BS, _resolved(caps), mode, ttl, BPT)
    want = simulate_tiers(trace, caps, mode, None if ttl_ms is None else ttl)
    K = len(caps)
    for k in range(K):
        assert list(hit_b[k]) == [w[0][k] for w in want]
        assert list(hit_t[k]) == [w[1][k] for w in want]
        assert tiers[k]["write_bytes"] == sum(w[2][k] for w in want) * BS * BPT, (k, mode)
        assert tiers[k]["occupancy_end_bytes"] == want[-1][3][k] * BS * BPT
        assert tiers[k]["occupancy_peak_bytes"] == max(w[3][k] for w in want) * BS * BPT
        full = [i for i, w in enumerate(want) if w[3][k] >= caps[k]]
        t = ts_us(trace)
        assert tiers[k]["first_full_s"] == (None if not full else (t[full[0]] - t[0]) / 1e6)
    assert tiers[-1]["evicted_bytes"] == sum(w[2][K] for w in want) * BS * BPT


@pytest.mark.parametrize("name", preset_names())
def test_presets_load_and_resolve_for_a_catalog_model(name):
    ts = load_tiers(name)
    assert ts.tiers[0].kind == "hbm" and ts.mode == "exclusive" and ts.compute.tflops
    res = resolve(ts, load_model("MiniMax-M2.7", "fp8"), 512)
    assert all(r.capacity_blocks > 0 for r in res)
    assert res[0].capacity_blocks < res[1].capacity_blocks < res[2].capacity_blocks


def test_seed_testbed_is_four_gpus_less_the_weights_512gb_dram_and_eight_drives():
    model = load_model("MiniMax-M2.7", "fp8")
    res = {r.tier.name: r for r in resolve(load_tiers("seed-testbed"), model, 512)}
    bpb = model.bytes_per_block(512)
    assert res["HBM"].capacity_blocks == int((4 * 96e9 * 0.9 - model.weights_bytes) // bpb)
    assert res["DRAM"].capacity_blocks == int(512e9 // bpb)
    assert res["NVMe"].capacity_blocks == int(8 * 12.8e12 / 2 // bpb)  # RAID10 mirrors
    raid0 = {r.tier.name: r for r in resolve(load_tiers("seed-testbed-raid0"), model, 512)}
    assert raid0["NVMe"].capacity_blocks == int(8 * 12.8e12 // bpb)


def test_dwpd_counts_mirrored_writes_and_write_amplification():
    d10 = Drives(count=8, size_bytes=int(12.8e12), raid="10")
    d0 = Drives(count=8, size_bytes=int(12.8e12), raid="0", waf=1.5)
    assert d10.dwpd(1.9e9) == pytest.approx(1.9e9 * 86400 * 2 / (8 * 12.8e12))
    assert d0.dwpd(1.9e9) == pytest.approx(1.9e9 * 86400 * 1.5 / (8 * 12.8e12))


def test_bad_tier_files_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="raid"):
        tiers_from_dict({"tier": [{"name": "x", "drives": {"count": 2, "size": "1TB", "raid": "5"}}]})
    with pytest.raises(ConfigError, match="speed"):
        tiers_from_dict({"tier": [{"name": "x", "speed": 3}]})
    with pytest.raises(ConfigError, match="inclusive"):
        resolve(
            TierSet("t", [Tier("a", capacity_tokens=400), Tier("b", capacity_tokens=40)], mode="inclusive"), None, 4
        )
    with pytest.raises(ConfigError, match="model"):
        resolve(TierSet("t", [Tier("a", capacity_bytes=10**9)]), None, 4)
    with pytest.raises(ConfigError, match="weights do not fit"):
        resolve(load_tiers("gh200"), load_model("DeepSeek-V3"), 512)
    bad = tmp_path / "t.toml"
    bad.write_text("name = 'x'\n[[tier]\n")
    with pytest.raises(ConfigError, match="TOML"):
        load_tiers(str(bad))
