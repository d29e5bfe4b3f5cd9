"""Replay progress: the fractions a replay reports through its steps, and the same answer with or
without them (the bar itself: tests/test_cli_progress.py)."""

from __future__ import annotations

import pytest

from kvtrace.replay.catalog import resolve_model
from kvtrace.replay.engine import replay
from kvtrace.replay.tiers import load_tiers
from kvtrace.replay.tracefile import read_trace
from tests.paths import CONVERSATION


@pytest.fixture(scope="module")
def trace():
    return read_trace(CONVERSATION)


@pytest.mark.parametrize("engine", ["numpy", "numba", "blocks"])
@pytest.mark.parametrize("with_tiers", [False, True])
def test_progress_rises_to_one_through_the_steps_and_changes_nothing(trace, engine, with_tiers):
    kw = dict(ttls=[300.0, None], engine=engine)
    if with_tiers:
        kw.update(model=resolve_model("MiniMax-M2"), tiers=load_tiers("seed-testbed"), tier_ttl=3600.0)
    seen = []
    watched = replay(trace, progress=lambda f, step: seen.append((f, step)), **kw)
    plain = replay(trace, **kw)
    assert watched.to_dict()["grid"] == plain.to_dict()["grid"]
    assert watched.to_dict()["capacity"] == plain.to_dict()["capacity"]
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and 0 <= fractions[0] < 0.6 and fractions[-1] == 1.0
    steps = list(dict.fromkeys(s for _, s in seen if s != "distances"))
    assert steps == (["grid", "tiers", "ttft", "capacity", "done"] if with_tiers else ["grid", "capacity", "done"])


def test_an_interrupted_watcher_stops_the_kernel_before_it_returns():
    """Ctrl-C (here: an error in the progress callback) while a compiled kernel runs in its thread:
    the kernel is asked to stop and waited for, so no kernel outlives its replay."""
    import threading

    from bench.bench_replay import make_fleet
    from kvtrace.replay.distances import NO_TTL, compute_distances

    fleet = make_fleet(300_000)

    def interrupt(_share):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compute_distances(fleet, [NO_TTL], engine="numba", on_progress=interrupt)
    assert not [t for t in threading.enumerate() if t.name == "kvtrace-replay-kernel"]
