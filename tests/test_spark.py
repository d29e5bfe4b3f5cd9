"""The Spark engine gives the local results exactly: prefix chains of randomized lakes linked in
Spark tasks (sessions spread over days, every partition size), the reuse report of the sample
traces' lake against the warehouse's, and the command line, in-process and under spark-submit.
Spark runs in local mode; tests skip without PySpark or Java, unless CI demands them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kvtrace.analyze.chains import ChainParams, derive_chains
from kvtrace.analyze.reuse_report import ReuseOptions, reuse_report
from kvtrace.errors import ConfigError
from kvtrace.store import Store
from kvtrace.store.lake import export_lake
from tests.conftest import require_module, require_tool
from tests.test_chains_partitions import assert_same, random_rows

ROOT = Path(__file__).resolve().parents[1]
TTLS = [60.0, 300.0, 3600.0, None]


@pytest.fixture(scope="module")
def spark():
    require_module("pyspark")
    require_tool("java")
    from kvtrace.analyze.spark import spark_session

    with spark_session("local[2]") as s:
        yield s


def write_lake(f: pl.DataFrame, lake: Path) -> None:
    """A lake's chain_requests table of a frame: rows numbered in time order, spread over two day
    folders so that sessions cross them."""
    rows = f.with_row_index("gidx").with_columns(pl.col("gidx").cast(pl.Int64)).drop("request_key")
    for day, part in enumerate((rows.filter(pl.col("gidx") % 2 == 0), rows.filter(pl.col("gidx") % 2 == 1))):
        folder = lake / "chain_requests" / f"day=2026-11-0{day + 1}"
        folder.mkdir(parents=True)
        part.write_parquet(folder / "part-0.parquet")


@pytest.mark.parametrize("seed", range(3))
def test_a_random_lake_gives_the_local_chains(spark, tmp_path, seed):
    from kvtrace.analyze.spark import lake_block_trace

    # Requests without a session id (one session to the derivation, of every org), and one
    # session id under two orgs.
    sid = pl.col("session_id")
    f = random_rows(seed, sessions=24).with_columns(
        session_id=pl.when(sid.is_in(["s001", "s002"]))
        .then(pl.lit(""))
        .when(sid == "s004")
        .then(pl.lit("s003"))
        .otherwise(sid)
    )
    write_lake(f, tmp_path / "lake")
    params = ChainParams(block_size=64, head_min_chains=2)
    want = derive_chains(f, params, materialize=False)
    assert want.meta["head"].any()
    for rows in (16, 10**9):  # many partitions, and one
        stats = {}
        got = lake_block_trace(spark, str(tmp_path / "lake"), params, partition_rows=rows, stats=stats)
        assert stats["partitions"] == (1 if rows > f.height else -(-f.height // rows))
        assert 0 < stats["task_peak_rss_bytes"] < 2**31  # a task holds its partition, not the lake
        assert_same(got, want)


@pytest.fixture(scope="module")
def sample_lake(tmp_path_factory):
    from kvtrace.ingest import ingest

    folder = tmp_path_factory.mktemp("sample-lake")
    db = folder / "w.duckdb"
    with Store(db) as store:
        ingest(store, [ROOT / "sample_traces"])
        export_lake(store, folder / "lake")
    return db, folder / "lake"


def without_source(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "source"}


@pytest.mark.parametrize(
    "opts",
    [
        dict(ttls=TTLS, series=True),
        dict(ttls=[300.0], chain=ChainParams(block_size=16, head_tokens=0, chain_per_model=False), partition_rows=50),
    ],
    ids=["defaults", "other-assumptions"],
)
def test_the_sample_lake_gives_the_warehouse_reuse_report(spark, sample_lake, opts):
    db, lake = sample_lake
    with Store(db, read_only=True) as store:
        want = reuse_report(store, ReuseOptions(**opts))
    got = reuse_report(None, ReuseOptions(lake=str(lake), **opts))
    assert got["source"] == str(lake) and want["trace"]["requests"] > 1000
    assert without_source(got) == without_source(want)
    assert spark.range(3).count() == 3  # the session it found running is still running


def test_a_lake_of_an_empty_window_has_no_data(spark, tmp_path):
    with Store(memory=True) as store:
        export_lake(store, tmp_path / "lake")
    report = reuse_report(None, ReuseOptions(lake=str(tmp_path / "lake")))
    assert report["no_data"] == f"No data: {tmp_path / 'lake'} holds no requests." and report["trace"] is None


def test_only_local_masters_are_started(spark):
    from kvtrace.analyze.spark import spark_session

    with pytest.raises(ConfigError, match="local Spark sessions only") as e:
        with spark_session("spark://cluster:7077"):
            pass
    assert "spark-submit" in e.value.hint
    with pytest.raises(ConfigError, match="already running"):
        with spark_session("local[1]"):
            pass


def test_a_lake_without_chain_rows_is_refused_with_the_fix(spark, tmp_path):
    from kvtrace.analyze.spark import lake_block_trace

    (tmp_path / "lake" / "requests").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no readable chain_requests") as e:
        lake_block_trace(spark, str(tmp_path / "lake"))
    assert "kvtrace lake" in e.value.hint


def test_a_lake_of_block_hash_traces_is_refused(spark, tmp_path):
    from kvtrace.analyze.spark import lake_block_trace

    write_lake(random_rows(0, sessions=2), tmp_path / "lake")
    folder = tmp_path / "lake" / "block_requests" / "day=2026-11-01"
    folder.mkdir(parents=True)
    pl.DataFrame({"trace": ["t"], "hash_ids": [[1, 2]]}).write_parquet(folder / "part-0.parquet")
    with pytest.raises(ConfigError, match="block-hash traces"):
        lake_block_trace(spark, str(tmp_path / "lake"))


def kvtrace(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvtrace", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--engine", "spark"], "reads a lake"),
        (["--engine", "local", "--lake", "somewhere"], "reads a lake"),
        (["--lake", "somewhere"], "no lake at somewhere"),
        (["--engine", "dask"], "unknown --engine"),
        (["--lake", "somewhere", "--since", "7d"], "window"),
    ],
)
def test_engine_options_are_checked_before_spark_starts(args, message, tmp_path):
    r = kvtrace("reuse", "--db", str(tmp_path / "none.duckdb"), *args)
    assert r.returncode == 1 and message in r.stderr, r.stderr


@pytest.fixture(scope="module")
def local_json(sample_lake) -> dict:
    r = kvtrace("reuse", "--db", str(sample_lake[0]), "--ttl", "5m,1h", "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_the_command_line_on_spark_prints_the_local_report(sample_lake, local_json):
    require_module("pyspark")
    require_tool("java")
    _, lake = sample_lake
    r = kvtrace(
        "reuse", "--engine", "spark", "--lake", str(lake), "--spark-master", "local[2]", "--ttl", "5m,1h", "-f", "json"
    )
    assert r.returncode == 0, r.stderr
    assert without_source(json.loads(r.stdout)) == without_source(local_json)


@pytest.mark.slow
def test_spark_submit_runs_the_same_job(sample_lake, local_json, tmp_path):
    """What docs/spark.md tells a cluster user to run, in local mode."""
    require_module("pyspark")
    require_tool("java")
    submit = Path(sys.executable).with_name("spark-submit")
    _, lake = sample_lake
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    # the file lookup docs/spark.md gives (importing kvtrace.__main__ would run the command line)
    lookup = 'import importlib.util as u; print(u.find_spec("kvtrace").submodule_search_locations[0] + "/__main__.py")'
    job = subprocess.run([sys.executable, "-c", lookup], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(job).is_file()
    out = tmp_path / "reuse.json"
    r = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", job]
        + ["reuse", "--engine", "spark", "--lake", str(lake), "--ttl", "5m,1h", "-f", "json", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert without_source(json.loads(out.read_text())) == without_source(local_json)
    # the master is spark-submit's: a second one is refused, not quietly run locally
    r = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", job]
        + ["reuse", "--lake", str(lake), "--spark-master", "local[2]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    said = r.stdout + r.stderr  # spark-submit merges the Python driver's stderr into its stdout
    assert r.returncode == 1 and "drop --spark-master" in said, said[-2000:]


def test_a_lake_missing_a_column_is_refused(spark, tmp_path):
    from kvtrace.analyze.spark import lake_block_trace

    folder = tmp_path / "lake" / "chain_requests" / "day=2026-11-01"
    folder.mkdir(parents=True)
    random_rows(0, sessions=2).drop("request_key").write_parquet(folder / "part-0.parquet")
    with pytest.raises(ConfigError, match="lacks the columns gidx"):
        lake_block_trace(spark, str(tmp_path / "lake"))


def test_a_failing_task_names_its_python_error(spark, tmp_path):
    from kvtrace.analyze.spark import lake_block_trace
    from kvtrace.errors import KvtraceError

    folder = tmp_path / "lake" / "chain_requests" / "day=2026-11-01"
    folder.mkdir(parents=True)
    f = random_rows(0, sessions=2).with_row_index("gidx").drop("request_key")
    f.with_columns(pl.lit("many").alias("read_tokens")).write_parquet(folder / "part-0.parquet")
    with pytest.raises(KvtraceError, match="the Spark job on .* failed: ValueError: invalid literal") as e:
        lake_block_trace(spark, str(tmp_path / "lake"))
    assert "Traceback" not in str(e.value)


def test_a_lake_holding_a_row_twice_is_refused(spark, tmp_path):
    from kvtrace.analyze.spark import lake_block_trace
    from kvtrace.errors import KvtraceError

    f = random_rows(1, sessions=3)
    write_lake(f, tmp_path / "lake")
    again = tmp_path / "lake" / "chain_requests" / "day=2026-11-01"
    shutil.copy(again / "part-0.parquet", again / "part-1.parquet")  # an export copied in twice
    with pytest.raises(KvtraceError, match="gidx must number the rows"):
        lake_block_trace(spark, str(tmp_path / "lake"))
