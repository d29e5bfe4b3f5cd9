"""The report's ``simulate`` section: ``kvtrace simulate``'s serving model of the window's warehouse
sessions. It equals ``kvtrace simulate --sessions warehouse`` on the same window and
configurations, from ``kvtrace report`` and from a scheduled run; it is there only when asked (and
the window has requests); a bad configuration is an error that names the option or the profile
key. (tests/test_report_registry.py checks that it reaches every rendering it declares.)"""

from __future__ import annotations

import io
import json

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.report.render import render_markdown
from kvtrace.schedule.profile import profile_from_dict
from kvtrace.store import Store
from tests.report_samples import load_rows, nightly_profile, week_rows

runner = CliRunner()
CONFIGS = ["gpu=seed-testbed:HBM", "dram=seed-testbed:HBM,DRAM"]


def _cli(*args) -> dict:
    res = runner.invoke(app, [*map(str, args)])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _simulate(db, since: str, until: str, sim: dict, *extra) -> dict:
    """``kvtrace simulate --sessions warehouse`` over the same window and span as a section."""
    return _cli(
        "simulate",
        "--sessions",
        "warehouse",
        "--db",
        db,
        "--since",
        since,
        "--until",
        until,
        "--duration",
        f"{sim['duration_s'] / 60:.0f}m",
        *(x for c in CONFIGS for x in ("--config", c)),
        *extra,
        "--format",
        "json",
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("w") / "kv.duckdb"
    with Store(path) as s:
        load_rows(s, week_rows(days=3))  # 2026-11-02..04
    return path


def test_the_section_is_kvtrace_simulate_on_the_report_window(db):
    # a day in Berlin: 2026-11-02T23:00Z to 2026-11-03T23:00Z
    rep = _cli(
        "report",
        "--db",
        db,
        "--since",
        "2026-11-03",
        "--until",
        "2026-11-04",
        "--timezone",
        "Europe/Berlin",
        *(x for c in CONFIGS for x in ("--simulate", c)),
        "--model",
        "MiniMax-M2.7",
        "--format",
        "json",
    )
    sim = rep["simulate"]
    assert sim["schema"] == "kvtrace.simulate/1" and [c["name"] for c in sim["configs"]] == ["gpu", "dram"]
    assert sim["node"]["model"] == "MiniMax-M2.7" and sim["node"]["kv_dtype"] == "bf16"
    # every request of the window is served, in a span from its first to 5 min after its last, in whole minutes
    for c in sim["configs"]:
        assert c["requests_started"] == rep["requests"] > 0 and c["ttft"]["unserved"] == 0
    assert sim["duration_s"] % 60 == 0 and 300 < sim["duration_s"] <= 86400 + 360
    # idle after its last request, a node keeps what it holds to the end of the run
    last, held = sim["configs"][0]["series"][-1], sim["configs"][0]["tiers"][0]
    assert last["running"] == 0 and last["occupancy_bytes"]["GPU"] > 0.5 * held["capacity_bytes"]
    assert _simulate(db, "2026-11-02T23:00:00", "2026-11-03T23:00:00", sim, "--model", "MiniMax-M2.7") == sim


def test_a_scheduled_run_simulates_its_period(tmp_path):
    prof = nightly_profile(tmp_path, ["json", "md"], f"simulate = {CONFIGS!r}")
    res = runner.invoke(app, ["run", str(prof), "--at", "2026-11-04T00:15"])
    assert res.exit_code == 0, res.output
    folder = tmp_path / "out" / "nightly" / "2026-11-03"
    sim = json.loads((folder / "report.json").read_text())["simulate"]
    assert _simulate(tmp_path / "kv.duckdb", "2026-11-03", "2026-11-04", sim) == sim  # kvtrace simulate's model
    md = (folder / "report.md").read_text()
    assert "## Serving model (simulated)\n\n| Configuration | Nodes | Peak tok/s |" in md
    assert "## Serving model: time to first token by cohort (seconds)" in md


def test_only_when_asked_and_only_with_requests(db):
    with Store(db, read_only=True) as s:
        plain = build_report(s, ReportOptions()).data
        empty = build_report(s, ReportOptions(since="2026-12-01", until="2026-12-02", simulate=CONFIGS)).data
    assert "simulate" not in plain and "simulate" not in empty and empty["no_data"]
    for d in (plain, empty):
        buf = io.StringIO()
        render_markdown(d, buf)
        assert "Serving model" not in buf.getvalue()


@pytest.mark.parametrize(
    "value, message, hint",
    [
        ("gpu=", "--simulate 'gpu=': no tier file", "e.g. --simulate dram=seed-testbed:HBM,DRAM"),
        ("gpu=seed-testbed:HBM,XPU", "--simulate gpu: tier 'XPU' is not in seed-testbed", "tiers: HBM, DRAM, NVMe"),
        ("gpu=no-such-tiers:HBM", "--simulate gpu: unknown tiers 'no-such-tiers'", "use a preset"),
        ("gpu=seed-testbed:DRAM", "--simulate gpu: the first tier must be the GPU's", "e.g. --simulate dram="),
    ],
)
def test_a_bad_simulate_value_is_a_clear_error_before_anything_runs(db, value, message, hint):
    res = runner.invoke(app, ["report", "--db", str(db), "--simulate", value])
    assert res.exit_code == 1 and message in res.output and hint in res.output, res.output


def test_two_configurations_of_one_name_are_an_error(db):
    res = runner.invoke(app, ["report", "--db", str(db), "--simulate", CONFIGS[0], "--simulate", CONFIGS[0]])
    assert res.exit_code == 1 and "two configurations share a name" in res.output and "--simulate gpu=" in res.output


@pytest.mark.parametrize(
    "value, message",
    [
        (["gpu=seed-testbed:XPU"], "p.toml: [analysis] simulate: configuration gpu: tier 'XPU' is not in seed-testbed"),
        ([1], "p.toml: [analysis] simulate must be a list of strings"),
        (["a=seed-testbed:HBM", "a=seed-testbed"], "p.toml: [analysis] simulate: two configurations share a name"),
    ],
)
def test_a_bad_profile_simulate_names_the_file_and_key(tmp_path, value, message):
    from kvtrace.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        profile_from_dict({"analysis": {"simulate": value}}, name="p", source=tmp_path / "p.toml")
    assert message in str(e.value)
    assert profile_from_dict({"analysis": {"simulate": "gpu=seed-testbed:HBM"}}, name="p").simulate == [CONFIGS[0]]


def test_a_stray_record_cannot_stretch_the_simulated_time(tmp_path):
    """A request recorded as lasting 30 days starts at most MAX_REQUEST_S before its end; a window
    spanning more than MAX_SIMULATED_S (one old record in a whole-warehouse report) is refused."""
    from kvtrace.report.sections import MAX_SIMULATED_S
    from kvtrace.simulate.sources import MAX_REQUEST_S

    rows = week_rows(days=1)
    rows[0]["duration_ms"] = 30 * 86400 * 1000
    path = tmp_path / "kv.duckdb"
    with Store(path) as s:
        load_rows(s, rows)
        d = build_report(s, ReportOptions(simulate=CONFIGS[:1])).data
    assert d["simulate"]["duration_s"] <= 86400 + MAX_REQUEST_S + 600
    with Store(path) as s:
        load_rows(s, week_rows(days=1, start=week_rows(days=1)[0]["ts"].replace(year=2025), prefix="old"))
    res = runner.invoke(app, ["report", "--db", str(path), "--simulate", CONFIGS[0]])
    assert res.exit_code == 1 and f"more than {MAX_SIMULATED_S / 86400:.0f}" in res.output, res.output
    assert "--since/--until" in res.output
