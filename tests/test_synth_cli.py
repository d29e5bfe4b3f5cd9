"""`kvtrace synth` on the command line, and the committed sample week it made."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.synth import SynthConfig, generate, preset

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces"


def test_small_run_prints_a_json_summary(tmp_path):
    r = runner.invoke(
        app,
        [
            "synth",
            "--preset",
            "sample-week",
            "--days",
            "1",
            "--seed",
            "3",
            "--out",
            str(tmp_path),
            "--json",
            "--cache-ttl",
            "1h",
        ],
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["requests"] > 0 and s["tokens"]["cache_write_5m_tokens"] == 0
    assert s["tokens"]["cache_write_1h_tokens"] > 0
    assert abs(sum(s["token_mix"].values()) - 1) < 1e-4
    assert (tmp_path / "otlp" / "logs.jsonl").stat().st_size > 0
    assert any((tmp_path / "claude" / "projects").rglob("*.jsonl"))
    assert "`cache_ttl_s` | `3600`" in (tmp_path / "synth-run.md").read_text()


def test_set_overrides_a_parameter(tmp_path):
    r = runner.invoke(
        app,
        [
            "synth",
            "--preset",
            "sample-week",
            "--days",
            "1",
            "--out",
            str(tmp_path),
            "--json",
            "--format",
            "otlp",
            "--set",
            'model_mix={"claude-haiku-4-5": 1}',
            "--set",
            "subagent_prob=0",
        ],
    )
    assert r.exit_code == 0, r.output
    logs = (tmp_path / "otlp" / "logs.jsonl").read_text()
    assert "claude-haiku-4-5" in logs and "claude-opus-4-6" not in logs and "subagent" not in logs
    assert not (tmp_path / "claude").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--cache-ttl", "five minutes"], "cache TTL"),
        (["--set", "no_such=1"], "unknown parameter"),
        (["--preset", "huge"], "unknown synth preset"),
        (["--format", "otlp,parquet"], "unknown synth format"),
        (["--set", "file_read_prob=2"], "file_read_prob"),
        (["--start", "yesterday"], "start"),
    ],
)
def test_bad_options_are_one_error_line(tmp_path, args, message):
    r = runner.invoke(app, ["synth", "--out", str(tmp_path), "--days", "0.01", *args])
    assert r.exit_code == 1, r.output
    assert "Error:" in r.output and message in r.output


def test_no_output_folder_is_an_error():
    r = runner.invoke(app, ["synth", "--days", "0.01"])
    assert r.exit_code == 1 and "--out" in r.output


def test_params_lists_every_parameter():
    r = runner.invoke(app, ["synth", "--params"])
    assert r.exit_code == 0
    for name in SynthConfig.__dataclass_fields__:
        assert name in r.output


# -- the committed sample week -------------------------------------------------------------------
def _sample_files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "README.md"
    }


def test_sample_week_is_what_the_readme_says(tmp_path):
    readme = (SAMPLE / "README.md").read_text()
    assert "kvtrace synth --preset sample-week --seed 7 --out sample_traces/ --gzip" in readme
    generate(preset("sample-week", seed=7), tmp_path, gzip=True)
    want, got = _sample_files(SAMPLE), _sample_files(tmp_path)
    assert got == want, (
        "sample_traces/ no longer matches the generator: regenerate it with "
        "`rm -rf sample_traces/otlp sample_traces/claude && kvtrace synth --preset sample-week "
        "--seed 7 --out sample_traces/ --gzip` and update the figures in its README"
    )
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 6_000_000
