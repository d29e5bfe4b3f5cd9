"""Prefix chains on Apache Spark, for a fleet whose telemetry lives in a lake.

``kvtrace lake`` writes ``chain_requests``: one row per request with what the chain derivation
reads, numbered in time order (``gidx``), the same rows ``kvtrace reuse`` reads from the
warehouse. Here Spark reads them, gathers each session into one partition, and runs the
derivation's per-partition step (:func:`kvtrace.analyze.chains.link_partition`) in its tasks
(``mapInArrow``). Each task sends its partition's numbers back as one Arrow IPC message; the
driver finishes the derivation (:func:`kvtrace.analyze.chains.derive_linked`) and runs the
analyses exactly as a local run does, so both give the same report.

A task holds one partition (about ``partition_rows`` requests); the driver holds the numbers of
every request, as a local run does, and at most ``FETCH_PARTITIONS`` result messages.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import sys
import threading
from pathlib import Path

from kvtrace.analyze.access import compact_ints
from kvtrace.analyze.chains import (
    LINK_COLUMNS,
    ChainParams,
    Linked,
    PartitionError,
    derive_linked,
    link_partition,
)
from kvtrace.errors import ConfigError, KvtraceError

CHAIN_TABLE = "chain_requests"
_REWRITE = "write the lake with this kvtrace version: kvtrace lake DIR --force"


# Local masters only: a session kvtrace starts binds 127.0.0.1, which a cluster's executors cannot
# reach (a cluster runs kvtrace through spark-submit, which starts the session).
_LOCAL_MASTER = re.compile(r"local(\[(\*|\d+)(,\s*\d+)?\])?")
# Linked partitions fetched by the driver at a time (a message is about 40 bytes a request, 13 MiB
# for 346 K): bounds the driver's memory, far under spark.driver.maxResultSize (1 GB by default).
FETCH_PARTITIONS = 8
# Requests per Spark task: a task has a fixed cost of its own, so fewer and larger than the local
# path's partitions (kvtrace.analyze.chains.PARTITION_ROWS).
SPARK_PARTITION_ROWS = 250_000


@contextlib.contextmanager
def spark_session(master: str | None = None):
    """The Spark session to run on: the one a notebook or ``spark-submit`` already started (its
    master and settings), else a local one on ``master`` (default ``local[*]``), bound to
    127.0.0.1 and stopped on the way out. Only a session started here is stopped here."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError(
            "the Spark engine needs PySpark", hint="pip install 'kvtrace[spark]' (and Java 17 or later)"
        ) from None

    if master is not None and not _LOCAL_MASTER.fullmatch(master):
        raise ConfigError(
            f"--spark-master {master}: kvtrace starts local Spark sessions only (local, local[N], local[*])",
            hint="on a cluster, run the command through spark-submit (docs/spark.md)",
        )
    active = SparkSession.getActiveSession()
    if active is not None:
        if master is not None and active.sparkContext.master != master:
            raise ConfigError(
                f"a Spark session on {active.sparkContext.master} is already running here",
                hint="drop --spark-master to use it",
            )
        yield _usable(active)
        return
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit
        if master is not None:
            raise ConfigError(
                "under spark-submit the master is spark-submit's",
                hint="drop --spark-master (use spark-submit --master)",
            )
        yield _usable(SparkSession.builder.getOrCreate())
        return
    log = Path(__file__).with_name("spark-log4j2.properties").as_uri()
    builder = (
        SparkSession.builder.master(master or "local[*]")
        .appName("kvtrace")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log}")
    )
    # Python workers run this interpreter (its kvtrace, numpy, numba), not the first python3 on
    # PATH; the JVM binds loopback. Both are read while the session starts.
    with _environ(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1"), _own_sigint():
        try:
            spark = builder.getOrCreate()
        except Exception as e:
            if "JAVA_GATEWAY_EXITED" not in str(e) and "Java gateway" not in str(e):
                raise
            raise ConfigError(
                "Spark could not start its JVM", hint="install Java 17 or later, or set JAVA_HOME"
            ) from None
    try:
        yield spark
    finally:
        spark.stop()


def _usable(spark):
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise ConfigError(
            "a Spark Connect session (Databricks serverless or shared access) has no RDD API, which kvtrace uses",
            hint="run on a classic (dedicated, single-user) cluster, or through spark-submit",
        )
    return spark


@contextlib.contextmanager
def _environ(**values: str):
    """Environment variables set for the block, then put back as they were."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if before[k] is None})
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)


@contextlib.contextmanager
def _own_sigint():
    """Keep the process's Ctrl-C handler: PySpark replaces it when a session starts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)


def lake_block_trace(
    spark,
    lake: str,
    params: ChainParams | None = None,
    partition_rows: int = SPARK_PARTITION_ROWS,
    stats: dict | None = None,
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
    if df is None:  # a lake of an empty window
        return derive_linked(iter(()), 0, p, materialize=False)
    n = df.count()
    k = max(1, -(-n // max(1, partition_rows)))
    linked = df.repartition(k, "session_id").mapInArrow(_LinkTask(p), "part binary, peak_rss long")
    peak = [0]

    def results():
        # A few partitions a job: the shuffle runs once, and the driver holds a few results.
        rdd, sc = linked.rdd, spark.sparkContext
        for lo in range(0, k, FETCH_PARTITIONS):
            try:
                got = sc.runJob(rdd, _parts, range(lo, min(k, lo + FETCH_PARTITIONS)))
            except Exception as e:
                if not type(e).__module__.startswith(("py4j", "pyspark")):
                    raise
                cause = _cause(e)
                raise KvtraceError(
                    f"the Spark job on {lake} failed: {cause}",
                    hint="every executor's Python needs kvtrace: install it on the nodes or ship an environment (docs/spark.md)"
                    if "ModuleNotFoundError" in cause
                    else "check the lake (kvtrace lake DIR --force writes it anew) and the executors' logs",
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


def check_lake(lake: str) -> Path | None:
    """A lake on this machine's file system as a folder (an error if there is none there), or
    None for a URI (``s3a://``, ``dbfs:/``...) that only the cluster reads."""
    if re.match(r"^[a-zA-Z][\w+.-]+:", str(lake)):
        return None
    if not Path(lake).is_dir():
        raise ConfigError(f"no lake at {lake}", hint="write one with kvtrace lake DIR")
    return Path(lake)


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
    local = check_lake(lake)
    if local is not None and not any(p.is_dir() and not p.name.startswith((".", "_")) for p in local.iterdir()):
        return None  # kvtrace lake writes no table of a window without rows
    try:
        df = spark.read.parquet(f"{lake}/{CHAIN_TABLE}")
    except AnalysisException as e:
        raise ConfigError(
            f"{lake} has no readable {CHAIN_TABLE} table ({str(e).splitlines()[0]})",
            hint=_REWRITE,
        ) from None
    missing = sorted(set(LINK_COLUMNS) - set(df.columns))
    if missing:
        raise ConfigError(
            f"{lake}/{CHAIN_TABLE} lacks the columns {', '.join(missing)}",
            hint=_REWRITE,
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
        if not sum(b.num_rows for b in batches):
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
        name: col.combine_chunks().to_numpy(zero_copy_only=False, writable=True)
        for name, col in zip(table.column_names, table.itercolumns(), strict=True)
    }
    threads = {int(first): label for first, label in labels["threads"]}
    return Linked(numbers, labels["models"], labels["hgroups"], threads)
