"""Prefix chains on Apache Spark, for a fleet whose telemetry lives in a lake.

``kvtrace lake`` writes ``chain_requests``: one row per request with what the chain derivation
reads, numbered in time order (``gidx``), the same rows ``kvtrace reuse`` reads from the
warehouse. Here Spark reads them, gathers each session into one partition, and runs the
derivation's per-partition step (:func:`kvtrace.analyze.chains.link_partition`) in its tasks
(``mapInArrow``). Each task sends its partition's numbers back as one Arrow IPC message; the
driver finishes the derivation (:func:`kvtrace.analyze.chains.derive_linked`) and runs the
analyses exactly as a local run does, so both give the same report.

A task holds one partition (about ``partition_rows`` requests); the driver holds the numbers of
every request, as a local run does, and at most one result message per core of the cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import sys
from pathlib import Path

import numpy as np

from kvtrace.analyze.access import compact_ints
from kvtrace.analyze.chains import (
    LINK_COLUMNS,
    ChainParams,
    Linked,
    PartitionError,
    derive_linked,
    link_partition,
)
from kvtrace.analyze.load import PARTITION_ROWS
from kvtrace.errors import ConfigError, KvtraceError

CHAIN_TABLE = "chain_requests"


@contextlib.contextmanager
def spark_session(master: str | None = None):
    """The Spark session to run on: the one a notebook or ``spark-submit`` already started (its
    master and settings), else a local one on ``master`` (default ``local[*]``), bound to
    127.0.0.1 and stopped on the way out."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        yield active
        return
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit
        yield SparkSession.builder.getOrCreate()
        return
    # Python workers run this interpreter (its kvtrace, numpy, numba), not the first python3 on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log = Path(__file__).with_name("spark-log4j2.properties")
    spark = (
        SparkSession.builder.master(master or "local[*]")
        .appName("kvtrace")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log}")
        .getOrCreate()
    )
    try:
        yield spark
    finally:
        spark.stop()


def lake_block_trace(
    spark, lake: str, params: ChainParams | None = None, partition_rows: int = PARTITION_ROWS, stats: dict | None = None
):
    """The prefix-chain trace of a lake's requests, linked in Spark tasks.

    Args:
        spark: a Spark session (see :func:`spark_session`).
        lake: the lake folder or URI (``kvtrace lake``; ``s3a://``, ``abfss://`` and ``dbfs:/``
            work where the cluster can read them).
        params: the chain assumptions.
        partition_rows: requests per Spark partition (sessions are never split; the result does
            not depend on it).
        stats: if given, filled with ``partitions`` and ``task_peak_rss_bytes`` (the largest
            resident size a Python worker reached).

    Returns:
        The same :class:`kvtrace.analyze.blocktrace.BlockTrace` as
        ``kvtrace.analyze.load.load_block_trace`` of the warehouse the lake was written from,
        without block ids (``materialize=False``).
    """
    p = params or ChainParams()
    lake = str(lake).rstrip("/")
    df = _read_chain_rows(spark, lake)
    n = df.count()
    k = max(1, -(-n // max(1, partition_rows)))
    linked = df.repartition(k, "session_id").mapInArrow(_LinkTask(p), "part binary, peak_rss long")
    peak = [0]

    def results():
        # Jobs of as many partitions as the cluster runs at once: the shuffle runs once, and the
        # driver holds at most that many results.
        rdd, sc = linked.rdd, spark.sparkContext
        step = max(1, sc.defaultParallelism)
        for lo in range(0, k, step):
            try:
                got = sc.runJob(rdd, _parts, range(lo, min(k, lo + step)))
            except Exception as e:
                if not type(e).__module__.startswith(("py4j", "pyspark")):
                    raise
                raise KvtraceError(
                    f"the Spark job on {lake} failed: {_cause(e)}",
                    hint="check the lake (kvtrace lake DIR --force writes it anew) and the executors' logs",
                ) from None
            for part, rss in got:
                peak[0] = max(peak[0], rss)
                yield _from_ipc(part)

    try:
        trace = derive_linked(results(), n, p, materialize=False)
    except PartitionError as e:
        raise KvtraceError(
            f"{lake}/{CHAIN_TABLE}: {e} (its gidx must number the rows 0..n-1, once each)",
            hint="write the lake anew (kvtrace lake DIR --force) rather than adding files to it",
        ) from None
    if stats is not None:
        stats.update(partitions=k, task_peak_rss_bytes=peak[0])
    return trace


def _read_chain_rows(spark, lake: str):
    from pyspark.errors import AnalysisException

    try:
        if spark.read.parquet(f"{lake}/block_requests").limit(1).count():
            raise ConfigError(
                f"{lake} holds block-hash traces: the Spark engine derives prefix chains from telemetry",
                hint="run kvtrace reuse on the warehouse for block-hash traces",
            )
    except AnalysisException:
        pass  # no block_requests folder: a lake of telemetry
    try:
        df = spark.read.parquet(f"{lake}/{CHAIN_TABLE}")
    except AnalysisException as e:
        raise ConfigError(
            f"{lake} has no readable {CHAIN_TABLE} table ({str(e).splitlines()[0]})",
            hint="write the lake with this kvtrace version: kvtrace lake DIR --force",
        ) from None
    missing = sorted(set(LINK_COLUMNS) - set(df.columns))
    if missing:
        raise ConfigError(
            f"{lake}/{CHAIN_TABLE} lacks the columns {', '.join(missing)}",
            hint="write the lake with this kvtrace version: kvtrace lake DIR --force",
        )
    return df.select(*LINK_COLUMNS)


def _cause(e: Exception) -> str:
    """The line of a Spark error that says what failed: the task's Python exception if any."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    said = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line) and "py4j" not in line]
    return (said or lines or [type(e).__name__])[-1][:500]


def _parts(rows):
    return [(bytes(r.part), r.peak_rss) for r in rows]


class _LinkTask:
    """What a Spark task runs: its partition's rows (Arrow batches) linked, as one IPC message."""

    def __init__(self, params: ChainParams) -> None:
        self.params = params

    def __call__(self, batches):
        import polars as pl
        import pyarrow as pa

        batches = list(batches)
        if not batches or not sum(b.num_rows for b in batches):
            return
        frame = pl.from_arrow(pa.Table.from_batches(batches))
        del batches
        blob = _to_ipc(link_partition(frame, self.params))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        yield pa.RecordBatch.from_pydict({"part": [blob], "peak_rss": [rss]})


def _to_ipc(linked: Linked) -> bytes:
    import msgspec
    import pyarrow as pa

    cols = {k: v if k == "ts_us" else compact_ints(v) for k, v in linked.numbers.items()}
    labels = {
        "models": linked.model_labels,
        "hgroups": linked.hgroup_labels,
        "threads": sorted(linked.thread_names.items()),
    }
    table = pa.table(cols).replace_schema_metadata({"kvtrace": msgspec.json.encode(labels)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(blob: bytes) -> Linked:
    import msgspec
    import pyarrow as pa

    table = pa.ipc.open_stream(blob).read_all()
    labels = msgspec.json.decode(table.schema.metadata[b"kvtrace"])
    numbers = {
        name: np.asarray(col.to_numpy()) for name, col in zip(table.column_names, table.itercolumns(), strict=True)
    }
    threads = {int(first): label for first, label in labels["threads"]}
    return Linked(numbers, labels["models"], labels["hgroups"], threads)
