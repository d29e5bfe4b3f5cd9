"""One way to name a model and its KV cache dtype on every command that turns tokens into bytes:
``--model NAME:fp8`` or ``--model NAME --kv-dtype fp8``, the same figures on each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.replay.catalog import catalog_names
from tests.paths import SYNTHETIC

FP8, BF16 = 126_976, 253_952  # MiniMax-M2.7: 2 x 62 layers x 8 KV heads x 128 x 1 or 2 bytes
SPELLINGS = {
    "suffix": ["--model", "MiniMax-M2.7:fp8"],
    "option": ["--model", "MiniMax-M2.7", "--kv-dtype", "fp8"],
    "both": ["--model", "MiniMax-M2.7:FP8", "--kv-dtype", "fp8"],
}
SAMPLE_LOGS = Path(__file__).resolve().parents[1] / "sample_traces" / "otlp" / "logs.jsonl.gz"


def _json(*args) -> dict:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("model") / "w.duckdb")
    assert CliRunner().invoke(app, ["ingest", "--db", path, str(SAMPLE_LOGS)]).exit_code == 0
    return path


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_size(spelling):
    out = _json("size", *SPELLINGS[spelling], "--rate", "4200", "--ttl", "1h", "--format", "json")
    assert (out["kv_dtype"], out["bytes_per_token"]) == ("fp8", FP8)
    assert out["capacity_bytes"] == 4200 * 3600 * FP8
    assert _json("size", "--model", "MiniMax-M2.7", "--format", "json")["bytes_per_token"] == BF16


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_replay(spelling):
    out = _json("replay", str(SYNTHETIC), "-c", "1M", "--ttl", "none", *SPELLINGS[spelling], "--format", "json")
    assert (out["model"]["kv_dtype"], out["model"]["bytes_per_token"]) == ("fp8", FP8)
    assert out["working_set"][0]["peak_bytes"] == out["working_set"][0]["peak_tokens"] * FP8


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_reuse(db, spelling):
    ws = _json("reuse", "--db", db, "--ttl", "1h", *SPELLINGS[spelling], "--format", "json")["ttl"][0]["working_set"]
    assert ws["peak_bytes"] == ws["peak_tokens"] * FP8
    bf16 = _json("reuse", "--db", db, "--ttl", "1h", "--model", "MiniMax-M2.7", "--format", "json")
    assert bf16["ttl"][0]["working_set"]["peak_bytes"] == ws["peak_tokens"] * BF16


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_report(db, spelling):
    out = _json("report", "--db", db, "--ttl", "1h", *SPELLINGS[spelling], "--format", "json")
    text = json.dumps(out)
    peaks = [(w["peak_tokens"], w["peak_bytes"]) for w in _working_sets(out)]
    assert peaks and all(b == t * FP8 for t, b in peaks), text[:300]


def _working_sets(data) -> list[dict]:
    """Every object of a report that has peak tokens and bytes."""
    found = []
    if isinstance(data, dict):
        if data.get("peak_bytes") is not None and "peak_tokens" in data:
            found.append(data)
        for v in data.values():
            found += _working_sets(v)
    elif isinstance(data, list):
        for v in data:
            found += _working_sets(v)
    return found


@pytest.mark.parametrize("command", [["size"], ["replay", str(SYNTHETIC)], ["reuse"], ["report"]])
def test_errors_name_every_catalog_model_and_both_dtypes(command, tmp_path):
    db = ["--db", str(tmp_path / "w.duckdb")] if command[0] in ("reuse", "report") else []
    r = CliRunner().invoke(app, [*command, *db, "--model", "MiniMax-M9"])
    assert r.exit_code == 1 and "unknown model 'MiniMax-M9'" in r.output
    for name in ("MiniMax-M2.7", "MiniMax-M2", "DeepSeek-V3", "Llama-3.1-70B"):
        assert name in r.output
    r = CliRunner().invoke(app, [*command, *db, "--model", "MiniMax-M2.7:fp8", "--kv-dtype", "bf16"])
    assert r.exit_code == 1 and "--kv-dtype" in r.output and "fp8" in r.output


def test_size_list_names_every_catalog_model():
    r = CliRunner().invoke(app, ["size", "--list"])
    assert r.exit_code == 0
    listed = [line.split()[0] for line in r.output.splitlines() if "B/token" in line]
    assert listed == catalog_names()
    assert {"MiniMax-M2.7", "MiniMax-M2.1", "MiniMax-M2", "DeepSeek-R1"} <= set(listed)
    rows = _json("size", "--list", "--model", "MiniMax-M2.7", "--kv-dtype", "fp8", "--format", "json")["models"]
    assert {r["model"]: r["bytes_per_token"] for r in rows}["MiniMax-M2.7"] == FP8
