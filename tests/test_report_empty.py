"""Empty is not zero: a report, a scheduled run, the index, replay and reuse over no data say so
instead of printing zeros (``Total 0 │ 100%``) as if they were a measurement."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.schedule.index import collect_runs, periods_back, render_index
from kvtrace.store import Store
from tests.report_samples import week_store

runner = CliRunner()


@pytest.fixture
def week_db(tmp_path):
    db = tmp_path / "kv.duckdb"
    with week_store(db):  # 2026-11-02 .. 2026-11-08
        pass
    return db


@pytest.fixture
def empty_db(tmp_path):
    db = tmp_path / "empty.duckdb"
    Store(db).close()
    return db


def report(db, *args):
    return runner.invoke(app, ["report", "--db", str(db), *map(str, args)])


# -- kvtrace report -------------------------------------------------------------------------------


def test_an_empty_warehouse_says_so_instead_of_a_zero_table(empty_db):
    res = report(empty_db)
    assert res.exit_code == 0, res.output
    assert "the warehouse holds no requests" in res.output and "kvtrace ingest" in res.output
    assert "Total" not in res.output and "100%" not in res.output


def test_an_empty_window_names_the_window_and_what_the_warehouse_holds(week_db):
    res = report(week_db, "--since", "2026-12-01", "--until", "2026-12-02")
    assert res.exit_code == 0, res.output
    assert "no requests from 2026-12-01T00:00:00Z to 2026-12-02T00:00:00Z" in res.output
    assert "the warehouse holds 2026-11-02" in res.output and "Total" not in res.output


def test_strict_makes_no_data_an_error_and_writes_nothing(week_db, empty_db, tmp_path):
    out = tmp_path / "r.json"
    res = report(week_db, "--since", "2026-12-01", "--strict", "--format", "json", "--out", out)
    assert res.exit_code == 1 and "Error: No data" in res.output and "--strict" in res.output
    assert not out.exists()
    assert report(empty_db, "--strict").exit_code == 1
    assert report(week_db, "--strict").exit_code == 0  # data: --strict changes nothing


@pytest.mark.parametrize("fmt", ["json", "md", "html"])
def test_every_format_carries_the_no_data_line(week_db, tmp_path, fmt):
    out = tmp_path / f"r.{fmt}"
    res = report(week_db, "--since", "2026-12-01", "--format", fmt, "--out", out)
    assert res.exit_code == 0 and "No data" in res.output  # said on stderr too
    text = out.read_text()
    assert "No data: no requests from 2026-12-01" in text
    if fmt == "json":
        d = json.loads(text)
        assert d["no_data"].startswith("No data") and d["requests"] == 0
    if fmt == "md":
        assert "| Total |" not in text


def test_a_window_with_requests_has_no_no_data_line(week_db):
    with Store(week_db, read_only=True) as s:
        d = build_report(s, ReportOptions(since="2026-11-03", until="2026-11-04")).data
    assert d["no_data"] is None and d["requests"] > 0


# -- kvtrace run / schedule -----------------------------------------------------------------------


@pytest.fixture
def profile(tmp_path, week_db):
    prof = tmp_path / "nightly.toml"
    prof.write_text(f"""
[inputs]
warehouse = "{week_db}"
[window]
period = "last 1d"
[output]
root = "{tmp_path / "out"}"
formats = ["json", "md"]
[schedule]
cron = "15 0 * * *"
""")
    return prof


def test_run_writes_no_report_for_a_period_without_data(profile, tmp_path):
    res = runner.invoke(app, ["run", str(profile), "--at", "2026-11-12T00:15"])
    assert res.exit_code == 0, res.output
    assert "2026-11-11: No data" in res.output and "No report written" in res.output and "--write-empty" in res.output
    assert not (tmp_path / "out" / "nightly" / "2026-11-11").exists()
    as_json = json.loads(runner.invoke(app, ["run", str(profile), "--at", "2026-11-12T00:15", "--json"]).output)
    assert as_json["files"] == [] and as_json["folder"] is None and as_json["no_data"].startswith("No data")
    asked = runner.invoke(app, ["run", str(profile), "--at", "2026-11-12T00:15", "--write-empty"])
    assert asked.exit_code == 0, asked.output
    rep = json.loads((tmp_path / "out" / "nightly" / "2026-11-11" / "report.json").read_text())
    assert rep["requests"] == 0 and rep["no_data"]


def test_the_profile_can_ask_for_empty_reports(profile, tmp_path):
    profile.write_text(
        profile.read_text().replace('formats = ["json", "md"]', 'formats = ["json", "md"]\nwrite_empty = true')
    )
    assert runner.invoke(app, ["run", str(profile), "--at", "2026-11-12T00:15"]).exit_code == 0
    assert (tmp_path / "out" / "nightly" / "2026-11-11" / "report.md").exists()


def test_schedule_says_a_period_had_no_data(profile):
    res = runner.invoke(app, ["schedule", str(profile), "--once"])  # today: long after the sample week
    assert res.exit_code == 0, res.output
    assert "has no requests, no report written" in res.output and "1 run(s)" in res.output


# -- the index compares with the previous period that has data ------------------------------------


def test_the_index_skips_periods_without_data_and_says_how_far_back(profile, tmp_path):
    with Store(profile.parent / "kv.duckdb") as s:  # 11-04 and 11-05 lose their requests
        s.run("DELETE FROM requests WHERE ts >= '2026-11-04' AND ts < '2026-11-06'")
    for at, extra in (
        ("2026-11-04T00:15", []),
        ("2026-11-05T00:15", ["--write-empty"]),
        ("2026-11-06T00:15", []),
        ("2026-11-07T00:15", []),
    ):
        res = runner.invoke(app, ["run", str(profile), "--at", at, *extra])
        assert res.exit_code == 0, res.output
    runs = {r["period"]: r for r in collect_runs(tmp_path / "out")["nightly"]}
    assert sorted(runs) == ["2026-11-03", "2026-11-04", "2026-11-06"]  # 11-05: empty, not written
    assert runs["2026-11-04"]["summary"]["requests"] == 0 and runs["2026-11-04"]["changes"] is None
    assert runs["2026-11-06"]["previous"] == "2026-11-03" and runs["2026-11-06"]["previous_periods_back"] == 3
    assert runs["2026-11-06"]["changes"]["requests"] is not None
    page = render_index(collect_runs(tmp_path / "out"), "now")
    assert "2026-11-03 (3 periods back: none of the 2 between has data)" in page
    assert "no data in this period" in page


def test_periods_back_follows_the_calendar():
    assert periods_back("calendar month", "2026-11-01T00:00:00Z", "2026-08-01T00:00:00Z") == 3
    assert periods_back("last 7d", "2026-11-09T00:00:00Z", "2026-11-02T00:00:00Z") == 1
    assert periods_back(None, "2026-11-09T00:00:00Z", "2026-11-02T00:00:00Z") is None


# -- replay and reuse -----------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["replay", "reuse"])
def test_replay_and_reuse_on_no_data_say_so(cmd, week_db, empty_db):
    for db, extra in ((empty_db, []), (week_db, ["--since", "2026-12-01"])):
        res = runner.invoke(app, [cmd, "--db", str(db), *extra])
        assert res.exit_code == 0, res.output
        assert "No data" in res.output and "Traceback" not in res.output
        js = runner.invoke(app, [cmd, "--db", str(db), *extra, "--format", "json"])
        assert js.exit_code == 0, js.output
        assert json.loads(js.stdout)["no_data"].startswith("No data")


def test_a_warehouse_of_block_traces_says_how_to_report_on_them(tmp_path):
    from tests.paths import SYNTHETIC

    db = tmp_path / "blocks.duckdb"
    assert runner.invoke(app, ["ingest", "--db", str(db), str(SYNTHETIC)]).exit_code == 0
    plain = report(db)
    assert plain.exit_code == 0 and "only block-hash traces" in plain.output and "--ttl or --tiers" in plain.output
    with Store(db, read_only=True) as s:
        d = build_report(s, ReportOptions(ttls=[300.0])).data
    assert d["no_data"] is None and d["ttl"]  # the replay is the report
