"""Replay progress: the fractions a replay reports, the same answer with or without them, and the
bar on a terminal only."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

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


def _stderr_of(argv: list[str], tty: bool) -> str:
    """stderr of a kvtrace command, written to a pseudo-terminal or to a pipe."""
    env = {**os.environ, "COLUMNS": "120"}
    if not tty:
        r = subprocess.run(argv, capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stderr.decode()
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            p.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:          # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=120) == 0, out
    os.close(master)
    return out.decode(errors="replace")


@pytest.mark.parametrize("tty", [True, False])
def test_the_replay_bar_shows_on_a_terminal_only(tmp_path, tty):
    err = _stderr_of([sys.executable, "-m", "kvtrace", "replay", str(CONVERSATION), "--ttl", "5m",
                      "--format", "json", "--out", str(tmp_path / "r.json")], tty)
    if tty:
        assert "replaying 12,031 requests" in err and "%" in err
    else:
        assert "replaying" not in err and "%" not in err
