"""The TTFT model on hand-checkable traces: reload + re-prefill, overlap, classes, GPU-seconds."""

from __future__ import annotations

import pytest

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.replay import TTFTConfig, replay
from kvtrace.replay.catalog import KVModel
from kvtrace.replay.tiers import Compute, Tier, TierSet

MODEL = KVModel(
    name="toy", layers=1, kv_heads=1, head_dim=5, attention_heads=2, params_total=1e9, params_active=1e9
)  # 2 x 1 x 1 x 5 x 2 B = 20 B per token
TIERS = TierSet(
    "toy",
    [
        Tier("fast", capacity_tokens=8, read_gbps=1e-6, latency_us=1000),
        Tier("slow", capacity_tokens=400, read_gbps=1e-7, latency_us=5000),
    ],
    compute=Compute(gpus=2, prefill_tokens_per_s=100.0, tflops=1.0, mfu=0.5),
)


def _trace(session=None):
    # Request 1 reuses request 0's 8 tokens; request 2 comes back 1000 s later and reuses all
    # 12 of request 1's tokens (3 blocks, of which the 8-token fast tier holds the first 2).
    return BlockTrace.from_lists(
        [0.0, 1.0, 1001.0], [8, 12, 14], [1, 1, 1], [[0, 1], [0, 1, 2], [0, 1, 2, 3]], 4, session=session
    )


def test_reload_and_prefill_per_request_with_the_rate_model():
    res = replay(_trace(), capacities=[None], ttls=[None], model=MODEL, tiers=TIERS, ttft=TTFTConfig(overlap=False))
    f = res.ttft
    # Request 1: 8 tokens in the fast tier (160 B at 1 kB/s + 1 ms), 4 tokens prefilled at 100/s.
    r1 = 160 / 1e3 + 0.001 + 4 / 100
    # Request 2: its 3 cached blocks sit at depths 1..3; the fast tier holds 2 blocks, the slow one
    # the third: 8 tokens fast, 4 tokens slow (80 B at 100 B/s + 5 ms), 2 tokens prefilled.
    r2 = 160 / 1e3 + 0.001 + 80 / 100 + 0.005 + 2 / 100
    r0 = 8 / 100
    assert f["all"]["max_ms"] == pytest.approx(max(r0, r1, r2) * 1e3)
    assert f["continuing"]["count"] == 1 and f["continuing"]["max_ms"] == pytest.approx(r1 * 1e3)
    assert f["resumed"]["count"] == 1 and f["resumed"]["max_ms"] == pytest.approx(r2 * 1e3)
    assert f["new"]["count"] == 1 and f["new"]["max_ms"] == pytest.approx(r0 * 1e3)
    assert f["gpu_seconds_avoided"] == pytest.approx({"fast": 16 / 100 * 2, "slow": 4 / 100 * 2})
    assert f["gpu_seconds_prefill"] == pytest.approx((8 + 4 + 2) / 100 * 2)
    assert res.tiers["tiers"][0]["hit_tokens"] == 16 and res.tiers["tiers"][1]["hit_tokens"] == 4


def test_overlap_takes_the_longer_of_reload_and_prefill():
    res = replay(_trace(), capacities=[None], ttls=[None], model=MODEL, tiers=TIERS, ttft=TTFTConfig(overlap=True))
    assert res.ttft["continuing"]["max_ms"] == pytest.approx(max(160 / 1e3 + 0.001, 4 / 100) * 1e3)


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_sessions_decide_resumption_when_the_trace_has_them(engine):
    import numpy as np

    res = replay(
        _trace(session=np.array([7, 7, 8])), capacities=[None], ttls=[None], model=MODEL, tiers=TIERS, engine=engine
    )
    assert (res.ttft["new"]["count"], res.ttft["continuing"]["count"], res.ttft["resumed"]["count"]) == (2, 1, 0)
    assert res.ttft["session_source"] == "session ids"


def test_flops_model_gpu_seconds_add_up():
    ts = TierSet("toy", TIERS.tiers, compute=Compute(gpus=2, tflops=1.0, mfu=0.5))
    res = replay(_trace(), capacities=[None], ttls=[None], model=MODEL, tiers=ts)
    f = res.ttft
    per_gpu = 1e12 * 0.5
    no_cache = sum(float(MODEL.prefill_flops(L)) for L in (8, 12, 14)) / per_gpu
    assert f["gpu_seconds_no_cache"] == pytest.approx(no_cache)
    assert f["gpu_seconds_prefill"] + sum(f["gpu_seconds_avoided"].values()) == pytest.approx(no_cache)
    # Reusing a prefix still costs the new tokens' attention over it: more than their share.
    assert f["gpu_seconds_prefill"] > no_cache * (8 + 4 + 2) / (8 + 12 + 14) * 0.99


def test_prefill_flops_match_the_closed_form():
    # 2 x active params per token, plus 4 x heads x head_dim per causal (query, key) pair and layer.
    n = 1000.0
    want = 2 * 1e9 * n + 1 * 4 * 2 * 5 * n * (n + 1) / 2
    assert float(MODEL.prefill_flops(n)) == pytest.approx(want)
