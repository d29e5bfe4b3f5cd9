"""``kvtrace replay`` end to end: trace files, the warehouse, JSON shape, errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvtrace.cli import app
from tests.paths import CONVERSATION, SYNTHETIC

CONV = str(CONVERSATION)
SYNTH = str(SYNTHETIC)


def _run(*args):
    return CliRunner().invoke(app, ["replay", *args])


def test_json_grid_and_tiers():
    r = _run(
        SYNTH,
        "-c",
        "1M,3M",
        "-c",
        "none",
        "--ttl",
        "5m",
        "--ttl",
        "none",
        "--tiers",
        "seed-testbed",
        "--model",
        "MiniMax-M2.7",
        "--kv-dtype",
        "fp8",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert len(out["grid"]) == 6
    assert set(out["grid"][0]) >= {"capacity_tokens", "ttl_s", "hit_ratio_tokens", "hit_ratio_blocks"}
    assert [(g["capacity_tokens"], g["ttl_s"]) for g in out["grid"][:3]] == [
        (1_000_000, 300.0),
        (3_000_000, 300.0),
        (None, 300.0),
    ]
    assert [t["name"] for t in out["tiers"]] == ["HBM", "DRAM", "NVMe"]
    assert out["tiers"][2]["dwpd_per_drive"] is not None and out["hierarchy"]["mode"] == "exclusive"
    assert out["ttft"]["all"]["count"] == 3993
    assert out["model"]["bytes_per_token"] == 126_976


def test_byte_capacities_convert_through_the_model():
    r = _run(SYNTH, "-c", "512GB", "--ttl", "none", "--model", "MiniMax-M2.7", "--kv-dtype", "fp8", "--format", "json")
    assert r.exit_code == 0, r.output
    g = json.loads(r.output)["grid"][0]
    assert g["capacity_tokens"] == int(512e9 // (512 * 126_976)) * 512
    r = _run(SYNTH, "-c", "512GB")
    assert r.exit_code == 1 and "--model" in r.output


def test_table_output():
    r = _run(CONV, "-c", "1M", "--ttl", "5m")
    assert r.exit_code == 0, r.output
    assert "Hit ratio" in r.output and "5.43%" in r.output


def test_bad_inputs_name_the_line(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1,\n')
    r = _run(str(bad))
    assert r.exit_code == 1 and "t.jsonl:2" in r.output
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": "1,2"}\n'
    )
    r = _run(str(bad))
    assert r.exit_code == 1 and "t.jsonl:2" in r.output and "hash_ids" in r.output
    r = _run(str(tmp_path / "missing.jsonl"))
    assert r.exit_code == 1 and "no such file" in r.output
    r = _run(SYNTH, "--ttl", "soon")
    assert r.exit_code == 1 and "duration" in r.output
    r = _run(SYNTH, "--tiers", "nope")
    assert r.exit_code == 1 and "seed-testbed" in r.output


def test_the_warehouse_replays_like_the_file(tmp_path):
    db = str(tmp_path / "w.duckdb")
    r = CliRunner().invoke(app, ["ingest", "--db", db, SYNTH])
    assert r.exit_code == 0, r.output
    from_db = _run("--db", db, "-c", "3M", "--ttl", "none", "--format", "json")
    from_file = _run(SYNTH, "-c", "3M", "--ttl", "none", "--format", "json")
    assert from_db.exit_code == 0, from_db.output
    a, b = json.loads(from_db.output)["grid"], json.loads(from_file.output)["grid"]
    assert [g["hit_tokens"] for g in a] == [g["hit_tokens"] for g in b]


def test_export_then_replay_reads_the_block_size_back(tmp_path):
    """kvtrace export writes 64-token blocks of derived chains and says so on every line; replay
    of that file gives the warehouse's own figures (it used to read them as 512-token blocks)."""
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "sample_traces"
    db, fleet = str(tmp_path / "w.duckdb"), tmp_path / "fleet.jsonl"
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--db", db, str(sample / "otlp" / "logs.jsonl.gz")]).exit_code == 0
    r = runner.invoke(app, ["export", "--db", db, "--out", str(fleet)])
    assert r.exit_code == 0, r.output
    assert "blocks of 64 tokens" in r.output
    assert {json.loads(line)["block_size"] for line in fleet.read_text().splitlines()} == {64}
    args = ["-c", "1M", "--ttl", "1h,none", "--model", "MiniMax-M2.7", "--kv-dtype", "fp8", "--format", "json"]
    from_db = json.loads(_run("--db", db, *args).stdout)
    from_file = json.loads(_run(str(fleet), *args).stdout)
    assert from_file["trace"]["block_size"] == 64 and from_file["warnings"] == []
    assert from_file["working_set"] == from_db["working_set"]
    assert [g["hit_tokens"] for g in from_file["grid"]] == [g["hit_tokens"] for g in from_db["grid"]]
    # ingested, the file keeps its block size too
    db2 = str(tmp_path / "w2.duckdb")
    assert runner.invoke(app, ["ingest", "--db", db2, str(fleet)]).exit_code == 0
    assert json.loads(_run("--db", db2, *args).stdout)["working_set"] == from_db["working_set"]
    # a --block-size that contradicts the file is an error naming the field
    r = _run(str(fleet), "--block-size", "512")
    assert r.exit_code == 1 and "block_size" in r.output and "64" in r.output


def test_a_block_trace_without_its_block_size_says_what_was_assumed(tmp_path):
    r = _run(SYNTH, "-c", "1M", "--ttl", "none", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["warnings"] == [
        "synthetic_trace.jsonl.gz: no block size in the file; assumed 512 tokens per block (Mooncake's). "
        "Pass --block-size if it differs: every token and byte figure scales with it."
    ]
    r = _run(SYNTH, "-c", "1M", "--ttl", "none")
    assert "assumed 512 tokens per block" in r.output
    r = _run(SYNTH, "-c", "1M", "--ttl", "none", "--block-size", "512", "--format", "json")
    assert json.loads(r.stdout)["warnings"] == []
    # lines that disagree name the line
    bad = tmp_path / "mixed.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1], "block_size": 64}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1], "block_size": 16}\n'
    )
    r = _run(str(bad))
    assert r.exit_code == 1 and "mixed.jsonl:2" in r.output and "block_size" in r.output
