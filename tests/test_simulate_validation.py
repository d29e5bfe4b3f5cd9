"""The seed-study scenario against the KV-offload study's figures (docs/simulate.md, "Validation").

The two efficiency factors were fitted on the GPU-only configuration only (to its ~12 K tokens/s
plateau); nothing else is tuned. Each test states its band. The figures the model does not reach
are strict expected failures: they document the miss and fail loudly the day the model reaches
them, so the table in the docs gets updated.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtrace.simulate.run import load_scenario, simulate

pytestmark = pytest.mark.slow  # end-to-end: real processes, servers or long runs (make test-all)


@pytest.fixture(scope="module")
def seed():
    res = simulate(load_scenario("seed-study"))
    return {c["name"]: c for c in res["configs"]}


def _tier(c, name):
    return next(t for t in c["tiers"] if t["name"] == name)


def test_gpu_only_plateau_is_12k_within_15_percent(seed):
    assert seed["gpu"]["steady_tokens_per_s"] == pytest.approx(12_000, rel=0.15)


def test_flash_reads_are_1_1_gb_per_s_within_30_percent(seed):
    assert _tier(seed["flash"], "NVMe")["read_bytes_per_s"] == pytest.approx(1.1e9, rel=0.30)


def test_resumed_ttft_ordering_gpu_only_far_worse_than_flash_worse_than_dram(seed):
    worst = {k: seed[k]["ttft"]["resumed"]["max_s"] for k in ("gpu", "flash", "dram")}
    median = {k: seed[k]["ttft"]["resumed"]["p50_s"] for k in ("gpu", "flash", "dram")}
    assert worst["gpu"] > 3 * worst["flash"] and worst["flash"] > worst["dram"]
    assert median["gpu"] > median["flash"] > median["dram"]


def test_offload_serves_more_than_gpu_only_once_the_gpu_saturates(seed):
    for k in ("dram", "flash"):
        assert seed[k]["steady_tokens_per_s"] > 2 * seed["gpu"]["steady_tokens_per_s"]


MISS = "the model misses this band of the study; see docs/simulate.md, Validation"


@pytest.mark.xfail(strict=True, reason=MISS)
def test_dram_peak_ratio_2_4_to_3_4(seed):
    assert 2.4 <= seed["dram"]["ratio_peak"] <= 3.4


@pytest.mark.xfail(strict=True, reason=MISS)
def test_flash_peak_ratio_1_8_to_2_6(seed):
    assert 1.8 <= seed["flash"]["ratio_peak"] <= 2.6


@pytest.mark.xfail(strict=True, reason=MISS)
def test_dram_first_fills_in_35_to_55_minutes(seed):
    assert 35 * 60 <= _tier(seed["dram"], "DRAM")["first_full_s"] <= 55 * 60


@pytest.mark.xfail(strict=True, reason=MISS)
def test_after_the_dram_fill_flash_serves_at_least_1_5x_dram_only(seed):
    assert seed["flash"]["steady_tokens_per_s"] >= 1.5 * seed["dram"]["steady_tokens_per_s"]


@pytest.mark.xfail(strict=True, reason=MISS)
def test_resumed_ttft_medians_within_30_percent(seed):
    for k, want in (("dram", 0.6), ("flash", 0.8), ("gpu", 1.4)):
        assert seed[k]["ttft"]["resumed"]["p50_s"] == pytest.approx(want, rel=0.30)


def test_a_client_side_cap_moves_the_queue_to_the_client(seed):
    """docs/simulate.md, "The study's figures against each other": at 16 requests in flight the
    server queues almost nothing and the resumed TTFTs fall to seconds, while the turns wait at
    the client; the peak ratios move little and steady throughput by at most 15%."""
    capped = {c["name"]: c for c in simulate(replace(load_scenario("seed-study"), max_in_flight=16))["configs"]}
    for k in ("gpu", "dram", "flash"):
        r = capped[k]["ttft"]["resumed"]
        assert r["queue_p50_s"] < 0.1 and r["client_wait_p50_s"] > 10
        assert abs(capped[k]["ratio_peak"] - seed[k]["ratio_peak"]) < 0.15
        assert capped[k]["steady_tokens_per_s"] == pytest.approx(seed[k]["steady_tokens_per_s"], rel=0.15)
    assert capped["gpu"]["ttft"]["resumed"]["max_s"] < 20 < seed["gpu"]["ttft"]["resumed"]["max_s"]
    assert capped["dram"]["ttft"]["resumed"]["p50_s"] < 1 < seed["dram"]["ttft"]["resumed"]["p50_s"]
