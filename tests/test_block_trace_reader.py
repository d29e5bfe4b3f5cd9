"""One block-trace reader (``kvtrace.ingest.block_hash``) for ingest, replay and reuse; the input
format forced with ``--input-format``; ``kvtrace ingest --block-size``."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.ingest.block_hash import parse_bailian, parse_mooncake
from kvtrace.replay.tracefile import read_trace
from tests.paths import CONVERSATION, raw

LINE = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}


def _jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else orjson.dumps(r).decode()) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("engine", ["arrow", "duckdb"])
def test_the_fast_path_and_the_line_by_line_path_read_alike(tmp_path, engine):
    """A clean file is read whole (by either engine); one bad line sends it line by line: the
    good lines come out the same either way."""
    data = raw(CONVERSATION)
    clean = tmp_path / "conv.jsonl"
    clean.write_bytes(data)
    faulty = tmp_path / "conv_bad.jsonl"
    faulty.write_bytes(data + b'{"timestamp": 1, "input_length": "many", "output_length": 1, "hash_ids": [1]}\n')
    fast, slow = parse_mooncake(clean, trace="t", engine=engine), parse_mooncake(faulty, trace="t", engine=engine)
    assert not fast.rejects and [(r.line, r.field) for r in slow.rejects] == [(12032, "input_length")]
    assert fast.block_requests.drop(["ingested_from"]).equals(slow.block_requests.drop(["ingested_from"]))
    # Bailian chat ids as numbers (the published traces) or text: the same rows
    line = {
        "chat_id": 7,
        "parent_chat_id": -1,
        "timestamp": 1.5,
        "input_length": 20,
        "output_length": 2,
        "type": "text",
        "turn": 1,
        "hash_ids": [1, 2],
    }
    as_numbers = parse_bailian(_jsonl(tmp_path / "n.jsonl", [line]), trace="b", engine=engine)
    as_text = parse_bailian(
        _jsonl(tmp_path / "s.jsonl", [{**line, "chat_id": "7", "parent_chat_id": "-1"}]), trace="b", engine=engine
    )
    mixed = parse_bailian(_jsonl(tmp_path / "m.jsonl", [line, {**line, "chat_id": "x8"}]), trace="b", engine=engine)
    assert as_numbers.block_requests.drop(["ingested_from"]).equals(as_text.block_requests.drop(["ingested_from"]))
    assert mixed.block_requests.column("chat_id").to_pylist() == ["7", "x8"] and not mixed.rejects


def test_both_engines_read_every_file_alike(tmp_path):
    """The engine is a speed choice only: rows, rejects and warnings are the same."""
    bad = [
        LINE,
        "",
        '{"timestamp": 5, "input_length": "12", "output_length": 1, "hash_ids": [1, 2]}',
        '{"timestamp": 7, "input_length": 12, "hash_ids": [1, 2]}',
        "[1, 2]",
        "{not json",
        {**LINE, "hash_ids": [1, 2**63]},
        {**LINE, "timestamp": -1},
        {**LINE, "block_size": 0},
    ]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(raw(CONVERSATION), mtime=0)[:300_000])
    files = [
        (parse_mooncake, CONVERSATION),
        (parse_mooncake, _jsonl(tmp_path / "bad.jsonl", bad)),
        (parse_mooncake, cut),
        (parse_bailian, _jsonl(tmp_path / "b.jsonl", BAILIAN)),
        (parse_bailian, _jsonl(tmp_path / "b2.jsonl", [{**BAILIAN[0], "chat_id": "c1"}, BAILIAN[1], "{"])),
    ]
    for parse, f in files:
        a, d = parse(f, engine="arrow"), parse(f, engine="duckdb")
        assert a.block_requests.equals(d.block_requests), f
        assert (a.rejects, a.warnings, a.lines) == (d.rejects, d.warnings, d.lines), f
    assert len(parse_mooncake(cut).rejects) == 1 and parse_mooncake(cut).block_requests.num_rows > 100


def test_replay_and_reuse_of_a_file_stop_at_a_bad_line(tmp_path):
    """Both read a file with the ingest's reader: a line it rejects is an error naming file, line
    and field (reuse used to drop such lines without a word)."""
    f = _jsonl(tmp_path / "bad.jsonl", [LINE, {**LINE, "timestamp": 5, "hash_ids": [1, "x"]}])
    for command in (["replay", f, "-c", "1M", "--ttl", "none"], ["reuse", f]):
        r = CliRunner().invoke(app, command)
        assert r.exit_code == 1, (command, r.output)
        assert "bad.jsonl:2: field 'hash_ids'" in r.output, r.output


def test_replay_reads_a_file_as_ingest_stores_it(tmp_path):
    """Numbers written as text and blank lines: the replay's trace is the ingested one."""
    f = _jsonl(
        tmp_path / "t.jsonl",
        [
            {**LINE, "timestamp": "2000", "input_length": "1030", "hash_ids": [1, 2, 3]},
            "",
            {**LINE, "timestamp": 1000, "input_length": 600, "hash_ids": [1, 2]},
        ],
    )
    tr = read_trace(f)
    assert tr.ts.tolist() == [1.0, 2.0] and tr.input_length.tolist() == [600, 1030]
    assert tr.hash_ids.tolist() == [1, 2, 1, 2, 3] and tr.block_size == 512
    stored = parse_mooncake(f).block_requests
    assert stored.column("ingested_from").to_pylist() == [f + ":1", f + ":3"]
    assert tr.meta["block_size_assumed"].startswith("t.jsonl: no block size in the file; assumed 512")


BAILIAN = [
    {
        "chat_id": 1,
        "parent_chat_id": -1,
        "timestamp": 0,
        "input_length": 40,
        "output_length": 7,
        "type": "text",
        "turn": 1,
        "hash_ids": [10, 11, 12],
    },
    {
        "chat_id": 2,
        "parent_chat_id": 1,
        "timestamp": 60,
        "input_length": 50,
        "output_length": 7,
        "type": "text",
        "turn": 2,
        "hash_ids": [10, 11, 12, 13],
    },
]


def test_format_is_the_output_format_of_ingest_and_the_old_spelling_says_the_new_one(tmp_path):
    f, db = _jsonl(tmp_path / "conv.jsonl", [LINE]), str(tmp_path / "w.duckdb")
    r = CliRunner().invoke(app, ["ingest", f, "--db", db, "--format", "mooncake"])
    assert r.exit_code == 1
    assert r.output == ("Error: --format is the output format; to force the input format use --input-format mooncake\n")
    r = CliRunner().invoke(app, ["ingest", f, "--db", db, "-f", "otlp-json"])
    assert r.exit_code == 1 and "use --input-format otlp-json" in r.output
    r = CliRunner().invoke(app, ["ingest", f, "--db", db, "-i", "mooncake", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["block_requests_added"] == 1
    again = CliRunner().invoke(app, ["ingest", f, "--db", db, "--json", "--force"])  # --json: --format json
    assert json.loads(again.stdout)["duplicates_skipped"] == 1
    text = CliRunner().invoke(app, ["ingest", f, "--db", db, "--format", "text"])
    assert text.exit_code == 0 and text.stdout.startswith("1 files (1 unchanged)")
    for bad in (["--format", "yaml"], ["--json", "--format", "text"]):
        r = CliRunner().invoke(app, ["ingest", f, "--db", db, *bad])
        assert r.exit_code == 1 and r.output.startswith("Error: ") and r.output.count("\n") == 1, r.output


def test_every_command_that_reads_a_file_forces_its_format_with_input_format(tmp_path):
    """A Bailian file (timestamps in seconds) read as Mooncake (milliseconds): 1000x shorter."""
    f = _jsonl(tmp_path / "b.jsonl", BAILIAN)

    def span(*args):
        r = CliRunner().invoke(app, ["replay", f, "-c", "1M", "--ttl", "none", "--format", "json", *args])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["trace"]["span_s"]

    assert span() == 60.0 and span("--input-format", "mooncake") == 0.06
    r = CliRunner().invoke(app, ["reuse", f, "-i", "mooncake", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["warnings"][0].startswith("b.jsonl: no block size in the file; assumed 512")
    db = str(tmp_path / "w.duckdb")
    r = CliRunner().invoke(app, ["report", "--db", db, "--ingest", f, "--input-format", "mooncake", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert (
        CliRunner()
        .invoke(app, ["replay", "--db", db, "-c", "1M", "--ttl", "none", "--format", "json"])
        .stdout.count('"span_s": 0.06')
        == 1
    )
    for command in (
        ["replay", f, "-i", "otlp-json"],
        ["reuse", "-i", "mooncake"],
        ["report", "--db", db, "-i", "bailian"],
    ):
        r = CliRunner().invoke(app, command)
        assert r.exit_code == 1 and "--input-format" in r.output, (command, r.output)


def _peaks(db: str, command: str = "replay") -> list[int]:
    args = ["-c", "none"] if command == "replay" else []
    r = CliRunner().invoke(app, [command, "--db", db, "--ttl", "5m,none", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    rows = d["working_set"] if command == "replay" else [t["working_set"] for t in d["ttl"]]
    return [w["peak_tokens"] for w in rows]


def test_ingest_block_size_is_stored_with_the_trace(tmp_path):
    """The FAST'25 files carry no block size: ingested with --block-size 64 instead of the
    assumed 512, every working set is 8x smaller in tokens (whole blocks), in replay and reuse."""
    runner = CliRunner()
    assumed, given = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    r = runner.invoke(app, ["ingest", str(CONVERSATION), "--db", assumed])
    assert r.exit_code == 0, r.output
    assert (
        "warning: conversation_trace.jsonl.gz: no block size in the file; assumed 512 tokens per block "
        "(Mooncake's). Pass --block-size if it differs"
    ) in r.stderr
    r = runner.invoke(app, ["ingest", str(CONVERSATION), "--db", given, "--block-size", "64", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["warnings"] == []
    for command in ("replay", "reuse"):
        big, small = _peaks(assumed, command), _peaks(given, command)
        assert big == [8 * x for x in small] and small[0] > 0, command
    # read again with another size, the stored trace would keep its own without a word: refused
    r = runner.invoke(app, ["ingest", str(CONVERSATION), "--db", given, "--block-size", "16", "--force"])
    assert r.exit_code == 1
    assert "trace 'conversation_trace' is stored with 64 tokens per block, this read gives 16" in r.output
    assert 8 * _peaks(given)[0] == _peaks(assumed)[0]  # nothing of that read stored
    # a file without block-hash traces: --block-size has nothing to apply to, and says so
    otlp = _jsonl(tmp_path / "empty-logs.jsonl", [{"resourceLogs": []}])
    r = runner.invoke(app, ["ingest", otlp, "--db", given, "--block-size", "64"])
    assert "--block-size 64 applies to block-hash traces (mooncake, bailian); none was read" in r.output


def test_a_file_with_its_own_block_size_keeps_it_and_a_different_block_size_is_refused(tmp_path):
    """kvtrace export writes block_size on every line: --block-size may repeat it, not change it."""
    runner = CliRunner()
    f = _jsonl(tmp_path / "fleet.jsonl", [{**LINE, "block_size": 64}, {**LINE, "timestamp": 9, "block_size": 64}])
    db = tmp_path / "w.duckdb"
    r = runner.invoke(app, ["ingest", f, "--db", str(db), "--block-size", "512"])
    assert r.exit_code == 1
    assert r.output == (
        f"Error: {f}: field 'block_size': the file says 64 tokens per block, --block-size says 512 "
        "(drop --block-size: the file's own size is used)\n"
    )
    assert not db.exists()  # a failed first ingest leaves no warehouse behind
    for extra in ([], ["--block-size", "64"]):
        r = runner.invoke(app, ["ingest", f, "--db", str(db), "--force", "--json", *extra])
        assert r.exit_code == 0 and json.loads(r.stdout)["warnings"] == [], r.output
    r = runner.invoke(app, ["replay", "--db", str(db), "-c", "none", "--ttl", "none", "--format", "json"])
    assert json.loads(r.stdout)["trace"]["block_size"] == 64


def test_reuse_of_a_file_takes_its_block_size_too(tmp_path):
    f = _jsonl(tmp_path / "t.jsonl", [{**LINE, "input_length": 1000, "hash_ids": [1, 2]}])

    def reuse(*args):
        r = CliRunner().invoke(app, ["reuse", f, "--ttl", "none", "--format", "json", *args])
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        return d["ttl"][0]["working_set"]["peak_tokens"], d["warnings"]

    tokens, warnings = reuse()
    assert tokens == 2 * 512 and warnings[0].startswith("t.jsonl: no block size in the file; assumed 512")
    tokens, warnings = reuse("--block-size", "64")
    assert tokens == 2 * 64 and not any("block size" in w for w in warnings)


def test_reading_a_trace_file_does_not_start_duckdb():
    """replay/reuse of a file read it with the ingest's parser, not with the ingest's pipeline:
    DuckDB's import (a tenth of a second) is not paid by a command that does not use it."""
    import subprocess
    import sys

    code = (
        "import sys; from kvtrace.replay.tracefile import read_trace; "
        f"t = read_trace({str(CONVERSATION)!r}); print(t.n_requests, 'duckdb' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["12031", "False"]


def test_replaying_a_small_trace_file_starts_neither_duckdb_nor_numba():
    """A small trace replays with the vectorized engine: neither DuckDB's import nor numba's (a
    fifth of a second, twice what the replay takes) is paid by it."""
    import subprocess
    import sys

    code = (
        "import sys; from kvtrace.replay import replay; from kvtrace.replay.tracefile import read_trace; "
        f"r = replay(read_trace({str(CONVERSATION)!r}), ttls=[300.0, None]); "
        "print(r.trace['requests'], 'duckdb' in sys.modules, 'numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["12031", "False", "False"]
