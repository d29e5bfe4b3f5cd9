"""``kvtrace size``: the seed study's figures, as library calls and through the CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.errors import ConfigError
from kvtrace.replay import resolve_model, size_calc
from kvtrace.replay.size import parse_drives


def test_rate_times_ttl_is_the_capacity():
    out = size_calc(resolve_model("MiniMax-M2.7:fp8"), rate_tokens_s=4200, ttl_s=3600)
    assert out["bytes_per_token"] == 126_976
    assert out["capacity_tokens"] == 15_120_000
    assert out["capacity_bytes"] == pytest.approx(1.92e12, rel=0.001)


@pytest.mark.parametrize("raid,want", [("10", 3.2), ("0", 1.6), ("1", 3.2)])
def test_dwpd_of_sustained_writes(raid, want):
    out = size_calc(write_bytes_s=1.9e9, drives=parse_drives("8x12.8TB", raid))
    assert out["dwpd_per_drive"] == pytest.approx(want, abs=0.01)


def test_minutes_a_capacity_holds():
    out = size_calc(resolve_model("MiniMax-M2.7:fp8"), rate_tokens_s=4200, capacity_bytes=512 * 10**9)
    assert out["minutes_held"] == pytest.approx(512e9 / 126_976 / 4200 / 60)


def test_nothing_to_calculate_is_an_error():
    with pytest.raises(ConfigError):
        size_calc()
    with pytest.raises(ConfigError, match="COUNTxSIZE"):
        parse_drives("12.8TB")


def test_size_cli_json():
    r = CliRunner().invoke(
        app,
        ["size", "--model", "MiniMax-M2.7", "--kv-dtype", "fp8", "--rate", "4200", "--ttl", "1h", "--format", "json"],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["bytes_per_token"], out["capacity_tokens"]) == (126_976, 15_120_000)
    r = CliRunner().invoke(
        app, ["size", "--write-rate", "1.9GB/s", "--drives", "8x12.8TB", "--raid", "10", "--format", "json"]
    )
    assert json.loads(r.output)["dwpd_per_drive"] == pytest.approx(3.2, abs=0.01)


def test_size_cli_table_and_errors():
    r = CliRunner().invoke(app, ["size", "--model", "MiniMax-M2.7", "--kv-dtype", "fp8"])
    assert r.exit_code == 0 and "126,976 B (127 KB)" in r.output
    r = CliRunner().invoke(app, ["size", "--model", "nope"])
    assert r.exit_code == 1 and "unknown model" in r.output
    r = CliRunner().invoke(app, ["size", "--list"])
    assert "MiniMax-M2" in r.output and "seed-testbed" in r.output
