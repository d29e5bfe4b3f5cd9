"""API spend what-if: 5 min vs 1 h TTL with the pricing table kept as data."""

from __future__ import annotations

import numpy as np
import pytest

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.chains import ChainParams, derive_chains
from kvtrace.analyze.spend import load_pricing, spend_whatif
from kvtrace.errors import ConfigError
from tests.chain_frames import frame


def two_requests(gap_s: float, model: str = "claude-sonnet-4-6"):
    """A conversation that comes back after ``gap_s``: under 5 min its prefix expired."""
    f = frame(
        dict(t=0, read=0, write=10_000, input_tokens=5, model=model),
        dict(t=gap_s, read=0, write=10_500, input_tokens=5, model=model),
    )
    return derive_chains(f, ChainParams(block_size=64, head_tokens=0), materialize=False)


def test_spend_by_hand():
    s = spend_whatif(two_requests(600))
    five, hour = s["ttl"]
    assert (five["ttl"], five["read_tokens"], five["write_tokens"]) == ("5m", 0, 20_500)
    assert (hour["ttl"], hour["read_tokens"], hour["write_tokens"]) == ("1h", 10_000, 10_500)
    # Sonnet 4.6: $3 input, $15 output per million; writes x1.25 (5 min) / x2 (1 h), reads x0.1.
    assert five["spend_usd"] == pytest.approx((10 * 3 + 20_500 * 3 * 1.25 + 200 * 15) / 1e6)
    assert hour["spend_usd"] == pytest.approx((10 * 3 + 10_500 * 3 * 2 + 10_000 * 3 * 0.1 + 200 * 15) / 1e6)
    assert s["observed"]["spend_usd"] == pytest.approx(five["spend_usd"])  # reported as 5 min writes
    assert s["writes_that_would_be_reads"] == 10_000
    assert s["net_difference_usd"] == pytest.approx(hour["spend_usd"] - five["spend_usd"])
    assert s["cheaper"] == "1h"
    assert s["by_model"][0]["model"] == "claude-sonnet-4-6" and not s["unpriced"]


def test_short_gaps_make_5m_cheaper():
    s = spend_whatif(two_requests(60))
    assert s["writes_that_would_be_reads"] == 0
    assert s["cheaper"] == "5m" and s["net_difference_usd"] > 0


def test_unknown_models_are_listed_not_priced():
    s = spend_whatif(two_requests(600, model="someone-elses-model"))
    assert s["unpriced"] == [{"model": "someone-elses-model", "prompt_tokens": 20_510}]
    assert s["ttl"][0]["spend_usd"] == 0


def test_pricing_file_overrides(tmp_path):
    p = tmp_path / "prices.toml"
    p.write_text(
        "[multipliers]\ncache_write_5m = 1.0\ncache_write_1h = 1.0\ncache_read = 0.0\n"
        '[[model]]\nmatch = "claude-*"\ninput = 1.0\noutput = 0.0\n'
    )
    s = spend_whatif(two_requests(600), load_pricing(p))
    assert s["ttl"][0]["spend_usd"] == pytest.approx(20_510 / 1e6)
    assert s["ttl"][1]["spend_usd"] == pytest.approx(10_510 / 1e6)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[model]]\ninput = 1\n")
    with pytest.raises(ConfigError, match="not a pricing table"):
        load_pricing(bad)


def test_builtin_pricing_is_data():
    pr = load_pricing()
    assert pr.price("claude-opus-4-6").input == 5.0 and pr.price("claude-opus-4-6").min_cacheable == 4096
    assert pr.price("claude-haiku-4-5-20251001").output == 5.0
    assert (pr.write_5m, pr.write_1h, pr.read) == (1.25, 2.0, 0.1)
    assert pr.price("gpt-5") is None


def test_block_traces_need_a_price_model():
    tr = BlockTrace.from_lists(
        [0, 100, 1000], [5000, 5000, 100], [10, 10, 10], [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [9]], 1024
    )
    with pytest.raises(ConfigError, match="no model to price"):
        spend_whatif(tr)
    s = spend_whatif(tr, model="claude-sonnet-4-6")
    five, hour = s["ttl"]
    # Request 2 hits its whole prompt; request 3 is below the 1024-token minimum: not cacheable.
    assert (five["read_tokens"], five["write_tokens"], five["input_tokens"]) == (5000, 5000, 100)
    assert hour["read_tokens"] == 5000 and "observed" not in s


def test_token_sums_past_float64s_exact_range_stay_exact():
    """Per-model sums are exact integers even where float64 could not hold them."""
    big = np.array([2**52 + 1, 2**52 + 3, 5], dtype=np.int64)
    trace = BlockTrace(
        np.arange(3.0), big, np.zeros(3, np.int64), np.zeros(4, np.int64), np.zeros(0, np.int64), 16, None
    )
    s = spend_whatif(trace, model="claude-sonnet-4-5")
    five = s["ttl"][0]
    assert five["read_tokens"] + five["write_tokens"] + five["input_tokens"] == int(big.sum()) == 2**53 + 9
