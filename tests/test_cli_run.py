"""``kvtrace run`` and ``kvtrace schedule``: period folders, the index with changes, refusal to
overwrite, atomic --force, image files, ingest of the profile's inputs."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.errors import ConfigError, ReportExists
from kvtrace.report.html import PNG_SCALE
from kvtrace.schedule import load_profile, run_profile
from tests.report_samples import nightly_profile, png_size

runner = CliRunner()


@pytest.fixture
def setup(tmp_path):
    """A warehouse with a week of requests (2026-11-02..08) and a daily profile writing to out/."""
    prof = nightly_profile(tmp_path, ["html", "json", "md", "png", "svg"], 'ttls = ["5m"]\ngroup_by = ["hour"]')
    return tmp_path, prof


def run(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def test_two_consecutive_periods_make_two_folders_and_an_index_with_changes(setup):
    tmp, prof = setup
    out = tmp / "out"
    r1 = run(prof, "--at", "2026-11-04T00:15")
    assert r1.exit_code == 0, r1.output
    r2 = run(prof, "--at", "2026-11-05T00:15", "--json")
    assert r2.exit_code == 0, r2.output
    assert json.loads(r2.output)["period"] == "2026-11-04"
    assert sorted(p.name for p in (out / "nightly").iterdir()) == ["2026-11-03", "2026-11-04"]
    for day in ("2026-11-03", "2026-11-04"):
        folder = out / "nightly" / day
        names = {p.name for p in folder.iterdir()}
        assert {"report.html", "report.json", "report.md", "summary.json", "charts"} <= names
        rep = json.loads((folder / "report.json").read_text())
        assert rep["window"]["since"] == f"{day}T00:00:00Z" and rep["requests"] > 0
    index = json.loads((out / "index.json").read_text())
    runs = index["profiles"]["nightly"]
    assert [r["period"] for r in runs] == ["2026-11-03", "2026-11-04"]
    assert runs[0]["changes"] is None
    first, second = runs[0]["summary"], runs[1]["summary"]
    ch = runs[1]["changes"]
    assert ch["requests"] == pytest.approx(second["requests"] / first["requests"] - 1)
    assert ch["shares_pp"]["cache_read"] == pytest.approx(
        100 * (second["shares"]["cache_read"] - first["shares"]["cache_read"])
    )
    assert ch["required_capacity"][0]["ttl_s"] == 300.0
    page = (out / "index.html").read_text()
    assert "Δ requests" in page and "Δ capacity" in page
    assert page.count("<tr>") == 3  # header + two runs
    assert ("▲" in page or "▼" in page or "= " in page) and 'href="nightly/2026-11-04/report.html"' in page


def test_a_profile_time_zone_sets_the_period_and_the_report_days(setup):
    tmp, prof = setup
    prof.write_text(prof.read_text().replace('period = "last 1d"', 'period = "last 1d"\ntimezone = "America/New_York"'))
    r = run(prof, "--at", "2026-11-04T00:15Z", "--json")  # 19:15 on 3 Nov in New York
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["period"] == "2026-11-02"
    rep = json.loads((tmp / "out" / "nightly" / "2026-11-02" / "report.json").read_text())
    assert (rep["window"]["since"], rep["window"]["until"]) == ("2026-11-02T05:00:00Z", "2026-11-03T05:00:00Z")
    r = run(prof, "--at", "2026-11-04T00:15", "--json")  # no offset: New York's 00:15
    assert r.exit_code == 0, r.output
    assert (json.loads(r.output)["period"], json.loads(r.output)["since"]) == ("2026-11-03", "2026-11-03T05:00:00Z")
    assert rep["window"]["timezone"] == "America/New_York"


def test_rerun_refuses_and_force_replaces_atomically(setup):
    tmp, prof = setup
    folder = tmp / "out" / "nightly" / "2026-11-03"
    assert run(prof, "--at", "2026-11-04T00:15").exit_code == 0
    (folder / "sentinel").write_text("old")
    inode = folder.stat().st_ino

    again = run(prof, "--at", "2026-11-04T00:15")
    assert again.exit_code == 1
    assert "already exists" in again.output and "--force" in again.output
    assert (folder / "sentinel").exists()

    forced = run(prof, "--at", "2026-11-04T00:15", "--force")
    assert forced.exit_code == 0, forced.output
    assert "replaced" in forced.output
    assert not (folder / "sentinel").exists() and (folder / "report.html").exists()
    assert folder.stat().st_ino != inode  # a new folder was swapped in
    assert [p.name for p in folder.parent.iterdir()] == ["2026-11-03"]  # no temporary folders left


def test_a_failed_forced_run_keeps_the_old_report(setup, monkeypatch):
    tmp, prof_path = setup
    prof = load_profile(prof_path)
    at = datetime(2026, 11, 4, 0, 15)
    first = run_profile(prof, at=at)
    (first.folder / "sentinel").write_text("old")

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("kvtrace.report.output.export_images", broken)
    with pytest.raises(OSError, match="disk full"):
        run_profile(prof, at=at, force=True)
    assert (first.folder / "sentinel").read_text() == "old"
    assert [p.name for p in first.folder.parent.iterdir()] == ["2026-11-03"]
    with pytest.raises(ReportExists):
        run_profile(prof, at=at)


def test_force_without_an_atomic_exchange_still_replaces(setup, monkeypatch):
    tmp, prof_path = setup
    prof = load_profile(prof_path)
    at = datetime(2026, 11, 4, 0, 15)
    first = run_profile(prof, at=at)
    (first.folder / "sentinel").write_text("old")
    monkeypatch.setattr("kvtrace.schedule.run._exchange", lambda a, b: False)
    again = run_profile(prof, at=at, force=True)
    assert again.replaced and not (again.folder / "sentinel").exists()
    assert [p.name for p in again.folder.parent.iterdir()] == ["2026-11-03"]


def test_chart_images_decode_at_the_expected_size(setup):
    tmp, prof = setup
    assert run(prof, "--at", "2026-11-04T00:15").exit_code == 0
    charts = tmp / "out" / "nightly" / "2026-11-03" / "charts"
    pngs = sorted(charts.glob("*.png"))
    assert {p.stem for p in pngs} >= {"token-mix-over-time", "working-set", "reuse-time-cdf"}
    for png in pngs:
        svg = ET.parse(png.with_suffix(".svg")).getroot()
        assert png_size(png.read_bytes()) == (
            round(float(svg.get("width")) * PNG_SCALE),
            round(float(svg.get("height")) * PNG_SCALE),
        ), png.name
    summary = json.loads((charts.parent / "summary.json").read_text())
    assert sorted(summary["files"]) == sorted(
        str(p.relative_to(charts.parent)) for p in charts.parent.rglob("*") if p.is_file() and p.name != "summary.json"
    )


def test_run_ingests_the_profile_inputs(tmp_path):
    synth = runner.invoke(
        app,
        [
            "synth",
            "--preset",
            "sample-week",
            "--days",
            "1",
            "--seed",
            "3",
            "-f",
            "otlp",
            "--out",
            str(tmp_path / "in"),
            "-q",
        ],
    )
    assert synth.exit_code == 0, synth.output
    spool = tmp_path / "spool"
    spool.mkdir()
    prof = tmp_path / "p.toml"
    prof.write_text(f"""
[inputs]
warehouse = "{tmp_path / "w.duckdb"}"
files = ["{tmp_path / "in" / "otlp"}"]
spool = "{spool}"
[window]
period = "last 7d"
[output]
root = "{tmp_path / "out"}"
formats = ["json"]
""")
    res = run_profile(load_profile(prof), at=datetime(2026, 3, 9))
    assert res.ingest["files"]["requests_added"] > 0 and res.ingest["spool"]["segments"] == 0
    rep = json.loads((res.folder / "report.json").read_text())
    assert rep["requests"] == res.ingest["files"]["requests_added"]
    assert res.folder.name == "2026-03-02--2026-03-08"
    again = run_profile(load_profile(prof), at=datetime(2026, 3, 10))  # the inputs are not re-read
    assert again.ingest["files"]["requests_added"] == 0 and again.ingest["files"]["files_skipped"] == 2
    prof.write_text(prof.read_text().replace(str(spool), str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="spool folder"):
        run_profile(load_profile(prof), at=datetime(2026, 3, 11))


def test_schedule_once_catches_up_then_finds_nothing_to_do(setup):
    tmp, prof = setup
    # today's period is long after the sample week: ask for its (empty) report
    first = runner.invoke(app, ["schedule", str(prof), "--once", "--write-empty"])
    assert first.exit_code == 0, first.output
    assert "wrote" in first.output and "1 run(s)" in first.output
    second = runner.invoke(app, ["schedule", str(prof), "--once", "--write-empty"])
    assert second.exit_code == 0 and "nothing to catch up" in second.output and "0 run(s)" in second.output


def test_run_names_a_missing_profile():
    res = run("no-such-profile")
    assert res.exit_code == 1 and "no profile 'no-such-profile'" in res.output and "daily" in res.output


def test_published_folders_are_readable(setup):
    tmp, prof = setup
    assert run(prof, "--at", "2026-11-04T00:15").exit_code == 0
    mode = (tmp / "out" / "nightly" / "2026-11-03").stat().st_mode & 0o777
    assert mode & 0o055 == 0o055, oct(mode)  # not mkdtemp's private 0700
    assert os.access(tmp / "out" / "index.html", os.R_OK) and Path(tmp / "out" / "index.json").exists()


@pytest.mark.slow
def test_schedule_runs_until_sigterm(setup):
    import signal
    import subprocess
    import sys
    import time

    tmp, prof = setup
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtrace", "schedule", str(prof), "--write-empty"],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not any((tmp / "out" / "nightly").glob("*/summary.json")):  # the catch-up run
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no catch-up run within 120 s"
            time.sleep(0.2)
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting for the next slot
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "stopped" in err
    assert "nightly: wrote" in out
