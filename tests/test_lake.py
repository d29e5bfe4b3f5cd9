"""The Parquet lake: partitioned by day, same totals as the warehouse, written atomically."""

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.errors import KvtraceError
from kvtrace.ingest.pipeline import IngestSummary, _merge
from kvtrace.store import Store
from kvtrace.store.lake import export_lake
from kvtrace.analyze.load import chain_partitions
from tests.builders import parsed


@pytest.fixture
def warehouse(db_path):
    with Store(db_path) as s:
        with s.transaction():
            _merge(
                s,
                parsed(
                    *(
                        dict(request_key=f"r{i}", ts=i * 600, output_tokens=i, cache_read_tokens=10 * i)
                        for i in range(1, 7)
                    )
                ),
                IngestSummary(),
            )
    return db_path


def test_lake_partitions_by_day_and_keeps_every_token(warehouse, tmp_path):
    out = tmp_path / "lake"
    with Store(warehouse, read_only=True) as s:
        counts = export_lake(s, out)
    assert counts == {"requests": 6, "chain_requests": 6}
    days = sorted(p.name for p in (out / "requests").iterdir())
    # requests every 10 h from 2026-11-02 19:00 UTC
    assert days == ["day=2026-11-02", "day=2026-11-03", "day=2026-11-04"]
    got = duckdb.sql(
        f"SELECT count(*), sum(output_tokens), sum(cache_read_tokens) FROM "
        f"read_parquet('{out}/requests/*/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert got == [(6, 21, 210)]
    # The rows chain derivation reads from the warehouse, numbered in time order as it numbers them.
    with Store(warehouse, read_only=True) as s:
        times, parts = chain_partitions(s)
        want = pl.concat(list(parts))
    lake = pl.from_arrow(
        duckdb.sql(
            f"SELECT * EXCLUDE (day) FROM read_parquet('{out}/chain_requests/*/*.parquet', hive_partitioning = true) "
            "ORDER BY gidx"
        ).to_arrow_table()
    )
    assert len(times) == lake.height == 6
    assert lake.equals(want.select(lake.columns).sort("gidx"))


def test_lake_numbers_rows_of_one_time_by_request_key(db_path, tmp_path):
    """Requests of several sessions at the same instant: the lake's gidx is their place by time,
    then request key, as the warehouse orders them."""
    keys = ["r7", "r2", "r9", "r1", "r5", "r3", "r8", "r4", "r6"]
    with Store(db_path) as s:
        with s.transaction():
            rows = (dict(request_key=k, ts=i % 2, output_tokens=i, session_id=f"s{i % 3}") for i, k in enumerate(keys))
            _merge(s, parsed(*rows), IngestSummary())
        want = dict(s.query("SELECT output_tokens, row_number() OVER (ORDER BY ts, request_key) - 1 FROM requests"))
        export_lake(s, tmp_path / "lake")
    got = duckdb.sql(
        f"SELECT output_tokens, gidx FROM read_parquet('{tmp_path}/lake/chain_requests/*/*.parquet', "
        "hive_partitioning = true)"
    ).fetchall()
    assert dict(got) == want and len(got) == len(keys)


def test_existing_lake_needs_force_and_is_replaced_whole(warehouse, tmp_path):
    out = tmp_path / "lake"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with Store(warehouse, read_only=True) as s:
        with pytest.raises(KvtraceError, match="--force"):
            export_lake(s, out)
        export_lake(s, out, force=True)
    assert not (out / "stale.txt").exists() and (out / "requests").is_dir()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".lake")]


def test_cli_window(warehouse, tmp_path):
    r = CliRunner().invoke(app, ["lake", str(tmp_path / "l"), "--db", str(warehouse), "--since", "2026-11-03"])
    assert r.exit_code == 0, r.output
    assert "requests" in r.output


def test_force_survives_a_leftover_of_an_interrupted_replace(warehouse, tmp_path):
    out = tmp_path / "lake"
    with Store(warehouse, read_only=True) as s:
        export_lake(s, out)
        leftover = tmp_path / ".lake.old" / "requests"
        leftover.mkdir(parents=True)
        (leftover / "x").write_text("x")
        export_lake(s, out, force=True)
    assert (out / "requests").is_dir()
