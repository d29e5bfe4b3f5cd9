"""The console entry exits without the interpreter's teardown: nothing written may be lost, the
exit codes stay those of the command, and the warehouse is closed (checkpointed) first."""

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "claude_code" / "multi_turn" / "projects"


def kvtrace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVTRACE_NO_SERVE": "1"}
    return subprocess.run([sys.executable, "-m", "kvtrace", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_output_is_complete_and_the_warehouse_is_closed(tmp_path):
    db = tmp_path / "kv.duckdb"
    ing = kvtrace("ingest", str(FIXTURE), "--db", str(db), "--json", cwd=tmp_path)
    assert ing.returncode == 0, ing.stderr
    added = json.loads(ing.stdout)["requests_added"]
    assert added > 0
    # Closed before the exit: the write-ahead log was checkpointed into the file.
    assert db.exists() and not Path(f"{db}.wal").exists()
    rep = kvtrace("report", "--db", str(db), "--group-by", "day", "--format", "json", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["requests"] == added  # the whole document arrived through the pipe


def test_exit_codes_are_the_commands(tmp_path):
    bad = kvtrace("ingest", str(tmp_path / "missing"), "--db", str(tmp_path / "kv.duckdb"), cwd=tmp_path)
    assert bad.returncode == 1 and "Error:" in bad.stderr and "no such file" in bad.stderr
    assert kvtrace("report", "--no-such-option", cwd=tmp_path).returncode == 2
    assert kvtrace("--help", cwd=tmp_path).returncode == 0
