"""Cost where people look for it: a $ column in every group table (JSON, Markdown, HTML,
terminal), --group-by week/month, --timezone day boundaries, cost in scheduled runs' summaries
and the index's changes, and ``kvtrace --version``."""

from __future__ import annotations

import io
import json

import pytest
from typer.testing import CliRunner

from kvtrace import __version__
from kvtrace.cli import app
from kvtrace.errors import ConfigError
from kvtrace.report import render
from kvtrace.report.build import ReportOptions, build_report
from kvtrace.report.html import _body
from kvtrace.store import Store
from tests.report_samples import load_rows, week_rows, week_store

runner = CliRunner()

# Built-in list prices (USD per million tokens): sonnet-4-6 3 / 15, opus-4-6 5 / 25;
# writes x1.25 (5 min and unknown TTL) or x2 (1 h), reads x0.1 of the input price.
ROWS = [
    dict(
        request_key="a",
        ts=0,
        model="claude-sonnet-4-6",
        session_id="s1",
        user_id="ann",
        input_tokens=1_000,
        cache_read_tokens=100_000,
        cache_write_5m_tokens=2_000,
        output_tokens=500,
    ),
    dict(
        request_key="b",
        ts=30,
        model="claude-opus-4-6",
        session_id="s2",
        user_id="bob",
        input_tokens=10,
        cache_read_tokens=50_000,
        cache_write_1h_tokens=4_000,
        cache_write_unknown_tokens=800,
        output_tokens=1_000,
        cost_usd=0.2,
    ),
    dict(
        request_key="c",
        ts=60,
        model="local-llama",
        session_id="s3",
        user_id="bob",
        input_tokens=5_000,
        output_tokens=100,
    ),
]
COST_A = (3 * (1_000 + 1.25 * 2_000 + 0.1 * 100_000) + 15 * 500) / 1e6
COST_B = (5 * (10 + 2 * 4_000 + 1.25 * 800 + 0.1 * 50_000) + 25 * 1_000) / 1e6


@pytest.fixture
def priced(store):
    load_rows(store, ROWS)
    return store


def test_every_group_entry_has_its_list_price_cost(priced):
    d = build_report(priced, ReportOptions(group_by=["user", "model", "session", "agent", "day"])).data
    assert d["cost"]["cost_usd"] == pytest.approx(COST_A + COST_B)
    assert d["cost"]["unpriced_requests"] == 1 and d["cost"]["reported_cost_usd"] == pytest.approx(0.2)
    users = {e["key"]: e for e in d["groups"]["user"]}
    assert users["ann"]["cost_usd"] == pytest.approx(COST_A)
    assert users["bob"]["cost_usd"] == pytest.approx(COST_B) and users["bob"]["unpriced_requests"] == 1
    models = {e["key"]: e for e in d["groups"]["model"]}
    assert models["local-llama"]["cost_usd"] is None  # unknown, not $0
    assert models["claude-opus-4-6"]["reported_cost_usd"] == pytest.approx(0.2)
    assert {e["key"]: e["cost_usd"] for e in d["groups"]["session"]}["s1"] == pytest.approx(COST_A)
    assert d["groups"]["agent"][0]["cost_usd"] == pytest.approx(COST_A + COST_B)
    assert d["groups"]["day"][0]["cost_usd"] == pytest.approx(COST_A + COST_B)


def test_a_pricing_file_changes_the_cost(priced, tmp_path):
    f = tmp_path / "prices.toml"
    f.write_text('[[model]]\nmatch = "local-*"\ninput = 1.0\noutput = 2.0\n')
    d = build_report(priced, ReportOptions(group_by=["model"], pricing=str(f))).data
    assert d["cost"]["cost_usd"] == pytest.approx((5_000 + 2 * 100) / 1e6)
    assert d["cost"]["unpriced_requests"] == 2 and d["cost"]["pricing"] == str(f)


def test_cost_column_in_terminal_markdown_json_and_html(priced):
    d = build_report(priced, ReportOptions(group_by=["user", "day"])).data
    md = io.StringIO()
    render.render_markdown(d, md)
    text = md.getvalue()
    assert "| user | Requests | Total tokens | Read share | Cache write | Output | Hit ratio | Cost |" in text
    assert "| ann | 1 |" in text and f"${COST_A:,.2f} |" in text
    assert "(+1 unpriced)" in text and "Cost at list prices (built-in price table)" in text
    assert "## By day (UTC)" in text
    from rich.console import Console

    term = io.StringIO()
    render.render_terminal(d, Console(file=term, width=200))
    assert "Cost" in term.getvalue() and f"cost ${COST_A + COST_B:,.2f} at list prices" in term.getvalue()
    page = _body(d, {})
    assert "<th>Cost</th>" in page and f"<td>${COST_A:,.2f}</td>" in page and "Cost (list prices)" in page
    js = io.StringIO()
    render.render_json(d, js)
    assert json.loads(js.getvalue())["groups"]["user"][0]["cost_usd"] is not None


def test_cost_matches_the_spend_sections_observed_spend(store):
    load_rows(store, week_rows(days=2))
    d = build_report(store, ReportOptions(ttls=[300.0])).data
    assert d["cost"]["cost_usd"] == pytest.approx(d["spend"]["observed"]["spend_usd"], rel=1e-9)


def test_group_by_week_and_month(store):
    load_rows(store, week_rows(days=40, per_day=2, seed=3))  # 2026-11-02 .. 2026-12-11
    d = build_report(store, ReportOptions(group_by=["week", "month"])).data
    weeks = [e["key"] for e in d["groups"]["week"]]
    assert weeks[0] == "2026-W45" and weeks == sorted(weeks) and len(weeks) == 6
    assert [e["key"] for e in d["groups"]["month"]] == ["2026-11", "2026-12"]
    assert sum(e["requests"] for e in d["groups"]["month"]) == 80
    assert sum(e["cost_usd"] for e in d["groups"]["week"]) == pytest.approx(d["cost"]["cost_usd"])


def test_timezone_moves_day_boundaries_and_reads_naive_bounds_locally(store):
    # 23:30 UTC on Monday 2 November is 00:30 on Tuesday in Berlin (UTC+1 in November)
    load_rows(
        store,
        [
            dict(request_key="late", ts=14 * 60 + 30, output_tokens=5),
            dict(request_key="early", ts=-8 * 60, output_tokens=7),
        ],
    )  # 01:00 UTC
    utc = build_report(store, ReportOptions(group_by=["day"])).data
    assert [e["key"] for e in utc["groups"]["day"]] == ["2026-11-02"]
    berlin = build_report(store, ReportOptions(group_by=["day", "hour"], timezone="Europe/Berlin")).data
    assert [(e["key"], e["requests"]) for e in berlin["groups"]["day"]] == [("2026-11-02", 1), ("2026-11-03", 1)]
    assert [e["key"] for e in berlin["groups"]["hour"]] == ["2026-11-02T02:00", "2026-11-03T00:00"]
    assert berlin["window"]["timezone"] == "Europe/Berlin"
    tue = build_report(store, ReportOptions(since="2026-11-03", timezone="Europe/Berlin")).data
    assert tue["window"]["since"] == "2026-11-02T23:00:00Z" and tue["requests"] == 1
    kolkata = build_report(store, ReportOptions(group_by=["hour"], timezone="Asia/Kolkata")).data
    assert [e["key"] for e in kolkata["groups"]["hour"]] == ["2026-11-02T06:00", "2026-11-03T05:00"]
    with pytest.raises(ConfigError, match="unknown --timezone 'Mars/Olympus'"):
        build_report(store, ReportOptions(timezone="Mars/Olympus"))


def test_report_command_takes_week_month_and_timezone(tmp_path):
    db = tmp_path / "kv.duckdb"
    with Store(db) as s:
        load_rows(s, ROWS)
    res = runner.invoke(app, ["report", "--db", str(db), "-g", "week,month", "--timezone", "Asia/Tokyo", "-f", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert [e["key"] for e in d["groups"]["week"]] == ["2026-W45"] and d["window"]["timezone"] == "Asia/Tokyo"
    bad = runner.invoke(app, ["report", "--db", str(db), "--tz", "Europe/Nowhere"])
    assert bad.exit_code == 1 and "unknown --timezone 'Europe/Nowhere'" in bad.output and "IANA" in bad.output


def test_version():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"kvtrace {__version__}"


def test_scheduled_summaries_and_the_index_carry_cost(tmp_path):
    db = tmp_path / "kv.duckdb"
    with week_store(db):
        pass
    prof = tmp_path / "p.toml"
    prof.write_text(
        f'[inputs]\nwarehouse = "{db}"\n[window]\nperiod = "last 1d"\n'
        f'[output]\nroot = "{tmp_path / "out"}"\nformats = ["json"]\n'
    )
    said = runner.invoke(app, ["run", str(prof), "--at", "2026-11-04T00:15"])
    assert said.exit_code == 0, said.output
    said_json = json.loads(runner.invoke(app, ["run", str(prof), "--at", "2026-11-05T00:15", "--json"]).output)
    first = json.loads((tmp_path / "out" / "p" / "2026-11-03" / "summary.json").read_text())["summary"]
    assert f"40 requests, ${first['cost_usd']:,.2f} at list prices" in said.output
    assert said_json["summary"]["cost_usd"] > 0
    rep = json.loads((tmp_path / "out" / "p" / "2026-11-03" / "report.json").read_text())
    assert first["cost_usd"] == pytest.approx(rep["cost"]["cost_usd"]) and first["cost_usd"] > 0
    runs = json.loads((tmp_path / "out" / "index.json").read_text())["profiles"]["p"]
    assert runs[1]["changes"]["cost_usd"] == pytest.approx(runs[1]["summary"]["cost_usd"] / first["cost_usd"] - 1)
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<th>Δ cost</th>" in page and f"${first['cost_usd']:,.2f}" in page


def test_cost_is_the_same_bits_whatever_the_order_and_batching_of_the_rows():
    rows = week_rows(days=7, per_day=300, seed=11)
    for r, k in zip(rows, range(len(rows))):
        r["cost_usd"] = round(0.001 + (k % 97) * 0.0123456789, 10)  # reported costs too
    opts = ReportOptions(group_by=["day", "model", "session"])
    with Store(memory=True) as a, Store(memory=True) as b:
        load_rows(a, rows)
        back = rows[::-1]
        for i in range(0, len(back), 333):  # other order, other batches
            load_rows(b, back[i : i + 333])
        da, db = build_report(a, opts).data, build_report(b, opts).data
        again = build_report(a, opts).data
    for key in ("cost", "groups"):
        assert (
            json.dumps(da[key], sort_keys=True)
            == json.dumps(db[key], sort_keys=True)
            == json.dumps(again[key], sort_keys=True)
        )
