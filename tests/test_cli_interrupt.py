"""Ctrl-C during ``kvtrace ingest``: one line saying what was kept and what was rolled back,
exit 130, and a warehouse holding exactly the files that line names (never half a file)."""

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtrace.store import Store

pytestmark = pytest.mark.slow  # end-to-end: real processes, servers or long runs (make test-all)

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "sample_traces" / "otlp" / "logs.jsonl.gz"
REQUESTS = 1947  # distinct requests in LOGS (each copy holds the same ones)
COPIES = 16


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "KVTRACE_NO_SERVE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "kvtrace", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    # Plain files over the small-file size: one transaction each, so an interrupt can fall
    # between files, and the whole ingest lasts a few seconds.
    d = tmp_path_factory.mktemp("otlp")
    data = gzip.decompress(LOGS.read_bytes())
    for i in range(COPIES):
        (d / f"logs-{i}.jsonl").write_bytes(data)
    return d


@pytest.mark.parametrize("delay", [0.0, 0.5, 1.5, 3.0])
def test_ctrl_c_keeps_whole_files_and_says_which(inputs, tmp_path, delay):
    db = tmp_path / "kv.duckdb"
    p = start(["ingest", str(inputs), "--db", str(db), "-q"], tmp_path)
    # from the moment the warehouse is opened (the interpreter's own start-up is not kvtrace's)
    deadline = time.monotonic() + 60
    while not db.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if p.returncode == 0:  # finished before the signal (a fast machine): nothing to check
        assert delay >= 2.0, err
        return
    assert p.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Interrupted: "), err
    line = lines[0]
    stored = 0
    if db.exists():
        with Store(db, read_only=True) as s:
            stored = s.scalar("SELECT count(*) FROM ingested_files")
            requests = s.scalar("SELECT count(*) FROM requests")
        # whole files only: either none of the (identical) copies was stored, or all of its requests
        assert requests == (REQUESTS if stored else 0)
    if f"of {COPIES} files" in line:
        assert f"kept {stored} of {COPIES} files" in line
        assert f"({REQUESTS if stored else 0:,} requests added)" in line
        if stored < COPIES:
            # a signal between two batches leaves nothing to roll back
            assert "rolled back " in line or "nothing half-written" in line, line
            assert "run the same command again" in line
    else:
        assert stored == 0
    # the same command again finishes the rest, counting nothing twice
    p = start(["ingest", str(inputs), "--db", str(db), "--json"], tmp_path)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM requests") == REQUESTS
        assert s.scalar("SELECT count(*) FROM ingested_files") == COPIES
