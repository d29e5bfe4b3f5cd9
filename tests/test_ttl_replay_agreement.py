"""The replay engine's unlimited-capacity column equals the TTL what-if exactly (same semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from kvtrace.analyze.ttl import hit_ratios
from tests.ttl_oracle import TTLS, block_traces

replay_engine = pytest.importorskip("kvtrace.replay.engine")


def _unlimited_column(trace, ttls):
    res = replay_engine.replay(trace, capacities=[None], ttls=ttls)
    return [(g["ttl_s"], g["hit_tokens"], g["hit_blocks"]) for g in res.grid]


def _what_if(trace, ttls):
    return [(h["ttl_s"], h["hit_tokens"], h["hit_blocks"]) for h in hit_ratios(trace, ttls)]


@settings(max_examples=60, deadline=None)
@given(block_traces())
def test_unlimited_capacity_column_equals_the_what_if(trace):
    ttls = list(TTLS)
    assert _unlimited_column(trace, ttls) == _what_if(trace, ttls)


def test_on_the_mooncake_conversation_trace():
    from tests.paths import CONVERSATION

    from kvtrace.analyze.load import read_block_trace

    trace = read_block_trace(CONVERSATION)
    ttls = [60.0, 300.0, 600.0, None]
    assert _unlimited_column(trace, ttls) == _what_if(trace, ttls)
