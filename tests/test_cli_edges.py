"""The edges of the command line: what cannot be read is named with the reason and the fix, in
one line; nothing hangs, nothing is half-written, an input that yields nothing is an error."""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.cli.ingest import summary_line
from kvtrace.ingest import IngestSummary
from kvtrace.store import Store

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "sample_traces" / "otlp" / "logs.jsonl.gz"
REQUESTS = 1947
LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 3854889\n"
)
runner = CliRunner()


def kvtrace(*args: str, cwd: Path, timeout: float = 60, preexec_fn=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVTRACE_NO_SERVE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "kvtrace", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    errors = [ln for ln in lines if ln.startswith("Error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


def rows(db: Path) -> tuple[int, int]:
    with Store(db, read_only=True) as s:
        return s.scalar("SELECT count(*) FROM requests"), s.scalar("SELECT count(*) FROM ingested_files")


# -- what a walk finds that is not a regular file ------------------------------------------------


def test_a_walked_folder_skips_fifos_devices_and_broken_links_with_the_reason(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(LOGS, tree / "logs.jsonl.gz")
    os.mkfifo(tree / "pipe.jsonl")  # opening it blocks forever
    os.symlink("/dev/zero", tree / "zero.jsonl")  # endless bytes, no line break
    os.symlink(tmp_path / "gone.jsonl", tree / "dangling.jsonl")
    os.symlink("loop.jsonl", tree / "loop.jsonl")
    (tree / "empty.jsonl").write_bytes(b"")
    (tree / "bad.jsonl.gz").write_bytes(b"junk, not gzip\n")  # unreadable, not "unrecognized"
    db = tmp_path / "kv.duckdb"
    r = kvtrace("ingest", str(tree), "--db", str(db), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    skipped = {
        ln.split(": ", 1)[0].removeprefix("skipped "): ln.split(": ", 1)[1]
        for ln in r.stderr.splitlines()
        if ln.startswith("skipped ")
    }
    assert skipped == {
        str(tree / "pipe.jsonl"): "not a regular file (a FIFO)",
        str(tree / "zero.jsonl"): "not a regular file (a device)",
        str(tree / "dangling.jsonl"): "a broken link (its target does not exist)",
        str(tree / "loop.jsonl"): "cannot read: Too many levels of symbolic links",
        str(tree / "empty.jsonl"): "empty",
        str(tree / "bad.jsonl.gz"): "cannot read: Error -3 while decompressing data: incorrect header check",
    }
    assert "6 skipped" in r.stdout and "not telemetry" not in r.stdout
    assert rows(db) == (REQUESTS, 1)  # the skipped ones are not in the ledger: tried again next time


def test_a_fifo_named_on_the_command_line_is_not_called_missing(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    r = runner.invoke(app, ["ingest", str(tmp_path / "pipe.jsonl"), "--db", str(tmp_path / "kv.duckdb")])
    assert r.exit_code == 1
    assert "not a regular file (a FIFO)" in r.output and "kvtrace ingest -" in r.output
    assert "no such file" not in r.output


def test_one_empty_file_in_a_glob_does_not_abort_the_rest(tmp_path):
    shutil.copy(LOGS, tmp_path / "a.jsonl.gz")
    (tmp_path / "b.jsonl").write_bytes(b"")
    db = tmp_path / "kv.duckdb"
    r = kvtrace("ingest", str(tmp_path / "*.json*"), "--db", str(db), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"skipped {tmp_path / 'b.jsonl'}: empty" in r.stderr
    assert rows(db) == (REQUESTS, 1)


def test_sniffing_reads_a_bounded_prefix(tmp_path):
    from kvtrace.errors import UnknownFormat
    from kvtrace.ingest.formats import SNIFF_BYTES, sniff

    big = tmp_path / "noise.jsonl"
    with open(big, "wb") as fh:  # one "line" far longer than the bound
        fh.write(b"x" * (3 * SNIFF_BYTES))
    with pytest.raises(UnknownFormat):
        sniff(big)


def without_dac_override(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """kvtrace as root reads files whatever their mode: as root, run it without the capabilities
    that bypass file modes (setpriv, util-linux), so the test runs in CI too."""
    if os.geteuid() != 0:
        return kvtrace(*args, cwd=cwd)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        if os.environ.get("KVTRACE_REQUIRE_TOOLS") == "1":
            pytest.fail("setpriv (util-linux) is required in CI to read as root without DAC override")
        pytest.skip("root reads files whatever their mode, and setpriv is not installed")
    env = {**os.environ, "KVTRACE_NO_SERVE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "kvtrace", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unreadable_files_and_folders_are_named_not_counted_as_unrecognized(tmp_path):
    tree = tmp_path / "tree"
    (tree / "locked").mkdir(parents=True)
    shutil.copy(LOGS, tree / "logs.jsonl.gz")
    shutil.copy(LOGS, tree / "secret.jsonl.gz")
    os.chmod(tree / "secret.jsonl.gz", 0)
    os.chmod(tree / "locked", 0)
    try:
        db = tmp_path / "kv.duckdb"
        r = without_dac_override("ingest", str(tree), "--db", str(db), "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert f"{tree / 'secret.jsonl.gz'}: cannot read: Permission denied" in out["skipped"]
        assert f"{tree / 'locked'}: cannot read the folder: Permission denied" in out["skipped"]
        assert "file:unrecognized" not in out["unknown_records"]
        r = without_dac_override("ingest", str(tree / "secret.jsonl.gz"), "--db", str(db), cwd=tmp_path)
        assert r.returncode == 1 and "Permission denied" in one_error_line(r.stderr)
    finally:
        os.chmod(tree / "locked", 0o755)


# -- an input that yields nothing is an error -----------------------------------------------------


def test_a_git_lfs_pointer_is_named(tmp_path):
    f = tmp_path / "trace.jsonl"
    f.write_text(LFS_POINTER)
    db = tmp_path / "kv.duckdb"
    r = runner.invoke(app, ["ingest", str(f), "--db", str(db)])
    assert r.exit_code == 1 and "Git LFS pointer" in r.output and "git lfs pull" in r.output
    # forced through a parser, every line is rejected: still an error, and it still says why
    for _ in range(2):  # not put in the ledger: a second run says it again
        r = kvtrace("ingest", str(f), "--db", str(db), "--input-format", "mooncake", cwd=tmp_path)
        assert r.returncode == 1
        assert "Git LFS pointer" in one_error_line(r.stderr)
    r = kvtrace("ingest", str(tmp_path), "--db", str(db), cwd=tmp_path)
    assert r.returncode == 1 and "no file was recognised" in one_error_line(r.stderr)
    assert f"skipped {f}: it is a Git LFS pointer" in r.stderr


def test_a_file_whose_every_line_is_rejected_is_an_error_naming_the_first(tmp_path):
    f = tmp_path / "blocks.jsonl"
    f.write_text(
        '{"timestamp": "x", "input_length": 1, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": "lots", "output_length": 1, "hash_ids": [1]}\n'
    )
    good = tmp_path / "good.jsonl"
    good.write_text('{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [1]}\n')
    db = tmp_path / "kv.duckdb"
    r = kvtrace("ingest", str(good), str(f), "--db", str(db), cwd=tmp_path)
    assert r.returncode == 1
    line = one_error_line(r.stderr)
    assert f"{f}: nothing stored, all 2 lines" in line and "field 'timestamp'" in line
    with Store(db, read_only=True) as s:  # the good file is kept
        assert s.scalar("SELECT count(*) FROM block_requests") == 1


def test_a_folder_without_a_recognised_file_says_so(tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "history.jsonl").write_text('{"display": "hello", "ts": 1}\n')
    shutil.copy(LOGS, tmp_path / "logs.jsonl.gz")
    db = tmp_path / "kv.duckdb"
    assert runner.invoke(app, ["ingest", str(tmp_path / "logs.jsonl.gz"), "--db", str(db)]).exit_code == 0
    for _ in range(2):  # the second time from the ledger, which knows it is not telemetry
        r = runner.invoke(app, ["ingest", str(d), "--db", str(db)])
        assert r.exit_code == 1 and f"{d}: no file was recognised among its 1 files" in r.output
    (tmp_path / "empty").mkdir()
    r = runner.invoke(app, ["ingest", str(tmp_path / "empty"), "--db", str(tmp_path / "kv.duckdb")])
    assert r.exit_code == 1 and "no .jsonl, .json or .ndjson files" in r.output


def test_a_failed_first_ingest_leaves_no_warehouse_behind(tmp_path):
    db = tmp_path / "kv.duckdb"
    for args in (["nothing-*.jsonl"], [str(tmp_path / "missing.jsonl")], [str(tmp_path)]):
        r = runner.invoke(app, ["ingest", *args, "--db", str(db)])
        assert r.exit_code == 1, r.output
        assert not db.exists() and not Path(f"{db}.wal").exists(), args


# -- the warehouse ------------------------------------------------------------------------------


def test_db_that_is_not_a_warehouse_is_named_as_such(tmp_path):
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    for db in (text, other):
        for cmd in (["ingest", str(LOGS)], ["report"]):
            r = runner.invoke(app, [*cmd, "--db", str(db)])
            assert r.exit_code == 1
            assert "not a kvtrace warehouse" in r.output and "another kvtrace process" not in r.output
    con = duckdb.connect(str(other), read_only=True)
    assert [t[0] for t in con.execute("SHOW TABLES").fetchall()] == ["t"]  # not written into
    con.close()


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_is_one_line_naming_the_warehouse_and_what_was_kept(tmp_path):
    db = tmp_path / "kv.duckdb"
    r = kvtrace(
        "ingest",
        str(LOGS),
        str(ROOT / "sample_traces" / "claude" / "projects"),
        "--db",
        str(db),
        "-q",
        cwd=tmp_path,
        preexec_fn=_file_size_limit(1_500_000),
    )
    assert r.returncode == 1
    line = one_error_line(r.stderr)
    assert f"cannot write the warehouse {db}: File too large" in line and "free space" in line
    assert "kept 1 of " in line and "rolled back" in line
    assert rows(db)[0] == REQUESTS  # the first file, whole; the batch after it not at all


# -- kvtrace query ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("wh") / "kv.duckdb"
    r = runner.invoke(app, ["ingest", str(LOGS), "--db", str(db), "-q"])
    assert r.exit_code == 0, r.output
    return db


def test_query_names_an_unknown_or_unparsable_parameter(warehouse):
    r = runner.invoke(app, ["query", "usage_window", "-p", "bogus=1", "--db", str(warehouse)])
    assert r.exit_code == 1
    assert "has no parameter 'bogus'" in r.output and "since, until" in r.output
    r = runner.invoke(app, ["query", "usage_window", "-p", "since=notadate", "--db", str(warehouse)])
    assert r.exit_code == 1
    assert "--param since='notadate'" in r.output and "e.g. -p since=" in r.output
    assert r.output.count("\n") == 1


def test_query_prints_a_table_not_a_dataframe_dump(warehouse):
    r = runner.invoke(app, ["query", "usage_bounds", "--db", str(warehouse)])
    assert r.exit_code == 0, r.output
    assert "shape:" not in r.output and "i64" not in r.output and "datetime[" not in r.output
    header = next(ln for ln in r.output.splitlines() if "first_ts" in ln)
    assert header.split() == ["first_ts", "last_ts", "requests", "metric_points", "block_requests"]
    assert "1,947" in r.output
    r = runner.invoke(app, ["query", "usage_window", "--limit", "2", "--db", str(warehouse)])
    assert "2 of 1,947 rows" in r.output
    assert max(len(ln) for ln in r.output.splitlines()) > 200  # one line per row, not wrapped


def test_unused_records_are_summarized():
    s = IngestSummary(
        files=3, unknown_records={f"metric:claude_code.kind_{i}": i + 1 for i in range(40)} | {"file:unrecognized": 2}
    )
    line = summary_line(s)
    assert len(line) < 250, line
    assert (
        "820 unused records (metric:claude_code.kind_39=40, metric:claude_code.kind_38=39, "
        "metric:claude_code.kind_37=38, 37 more kinds" in line
    )
    assert "2 not telemetry" in line


def test_report_out_says_what_it_wrote(warehouse, tmp_path):
    out = tmp_path / "r.md"
    r = runner.invoke(app, ["report", "--db", str(warehouse), "--format", "md", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "wrote the md report (" in r.output and f") to {out}" in r.output
    assert out.stat().st_size > 0


def test_a_missing_tiers_file_is_not_called_unknown_tiers(warehouse, tmp_path):
    r = runner.invoke(app, ["report", "--db", str(warehouse), "--tiers", str(tmp_path / "missing.toml")])
    assert r.exit_code == 1
    assert f"{tmp_path / 'missing.toml'}: no such tiers file" in r.output and "unknown tiers" not in r.output


def test_an_empty_file_named_on_the_command_line_is_skipped_and_said(tmp_path):
    f = tmp_path / "seg.jsonl"
    f.write_bytes(b"")
    r = kvtrace("ingest", str(f), "--db", str(tmp_path / "kv.duckdb"), "--input-format", "otlp-json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"skipped {f}: empty"
