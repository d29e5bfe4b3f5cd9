"""Progress on long work: on a terminal the ingest bar moves by bytes within a file and shows an
ETA, as does the replay's through its steps; reuse says what it is doing; nothing of it when
stderr is not a terminal."""

import fcntl
import gzip
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end-to-end: real processes, servers or long runs (make test-all)

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "sample_traces" / "otlp" / "logs.jsonl.gz"
BAR = re.compile(r"ingest\s+\S*\s+([0-9.]+)/([0-9.]+) MB\s+(?:\S+ MB/s|\?)\s+(\S+)")


def env() -> dict:
    e = {**os.environ, "KVTRACE_NO_SERVE": "1", "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    e.pop("COLUMNS", None)
    return e


def in_terminal(args: list[str], cwd: Path, timeout: float = 120) -> str:
    """Run kvtrace with stdin/stdout/stderr on a pseudo-terminal; its output without escapes."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    p = subprocess.Popen(
        [sys.executable, "-m", "kvtrace", *args], cwd=cwd, env=env(), stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=timeout) == 0, out[-2000:]
    return re.sub(rb"\x1b\[[0-9;?]*[a-zA-Z]", b"", out).decode(errors="replace")


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    """One plain OTLP file of ~150 MB (the sample's lines forty times over: the same requests), long
    enough to read that the bar is sampled several times within it, on an idle machine too."""
    f = tmp_path_factory.mktemp("big") / "logs.jsonl"
    data = gzip.decompress(LOGS.read_bytes())
    with open(f, "wb") as fh:
        for _ in range(40):
            fh.write(data)
    return f


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="read offsets come from /proc")
def test_the_ingest_bar_moves_within_one_file_with_an_eta(big_file, tmp_path):
    text = in_terminal(["ingest", str(big_file), "--db", str(tmp_path / "kv.duckdb")], tmp_path)
    frames = [(float(m[1]), float(m[2]), m[3]) for m in BAR.finditer(text)]
    assert frames, text[-2000:]
    total = frames[0][1]
    assert total == pytest.approx(big_file.stat().st_size / 1e6, abs=0.1)
    within = [f for f in frames if 0 < f[0] < total]
    assert within, frames  # moved before the file was done
    assert any(re.fullmatch(r"\d+:\d\d:\d\d", f[2]) for f in within), within  # an ETA, not -:--:--


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kvtrace", "ingest", str(LOGS), "--db", str(tmp_path / "kv.duckdb")],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and "1947 requests added" in r.stdout


TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake-fast25-conversation" / "conversation_trace.jsonl.gz"


def test_replay_and_reuse_say_what_they_are_doing(tmp_path):
    text = in_terminal(["replay", str(TRACE), "--ttl", "5m", "-c", "1M"], tmp_path)
    # the replay's bar: its step, the share done, elapsed time and an ETA
    assert re.search(
        r"replaying [0-9,]+ requests\s+[a-z]*\s*\S+\s+\d+%\s+\d+:\d\d:\d\d\s+(\d+:\d\d:\d\d|-:--:--)", text
    ), text[-2000:]
    text = in_terminal(["reuse", str(TRACE)], tmp_path)
    assert re.search(r"measuring reuse in \S+\s+\d+:\d\d:\d\d", text), text[-2000:]
    r = subprocess.run(
        [sys.executable, "-m", "kvtrace", "replay", str(TRACE), "--ttl", "5m", "-c", "1M"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "replaying" not in r.stderr, r.stderr


SIMULATE = [
    "simulate",
    "--config",
    "gpu=seed-testbed:HBM",
    "--config",
    "dram=seed-testbed:HBM,DRAM",
    "--duration",
    "10m",
    "--gpu-kv",
    "400K",
    "--format",
    "json",
    "-o",
    "sim.json",
]


def test_simulate_shows_which_configuration_runs_on_a_terminal(tmp_path):
    text = in_terminal(SIMULATE, tmp_path)
    assert re.search(r"simulating gpu\s.*0/2", text), text[-2000:]
    assert re.search(r"simulating dram\s.*1/2", text), text[-2000:]
    # the bar moves within a configuration, with its simulated time (a run long enough to be seen)
    text = in_terminal(
        [
            "simulate",
            "--config",
            "gpu=seed-testbed:HBM",
            "--duration",
            "2h",
            "--gpu-kv",
            "400K",
            "--format",
            "json",
            "-o",
            "long.json",
        ],
        tmp_path,
    )
    within = [int(p) for p in re.findall(r"simulating gpu\s.*?0/1\s+(\d+)%", text)]
    assert any(0 < p < 100 for p in within), within


def test_simulate_is_quiet_when_stderr_is_not_a_terminal(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kvtrace", *SIMULATE],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and (tmp_path / "sim.json").exists()
