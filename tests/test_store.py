from pathlib import Path

import duckdb
import pytest

from kvtrace.errors import SchemaError, UnknownQuery
from kvtrace.store import Store, list_queries, load_query


def test_migrations_are_recorded_and_idempotent(store):
    names = [r[0] for r in store.query("SELECT name FROM _migrations ORDER BY version")]
    assert names[0] == "001_init"
    assert store.migrate() == []  # nothing pending the second time


def test_reopen_file_keeps_data(db_path):
    with Store(db_path) as s:
        s.run(
            "INSERT INTO ingested_files (path, size, mtime_ns, format, ingested_at, rows_added, duplicates, lines_rejected) VALUES ('a', 1, 2, 'otlp-json', now(), 0, 0, 0)"
        )
    with Store(db_path, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM ingested_files") == 1


def test_read_only_missing_file_says_how_to_create(tmp_path):
    with pytest.raises(SchemaError, match="kvtrace ingest"):
        Store(tmp_path / "none.duckdb", read_only=True)


def test_read_only_on_foreign_database(tmp_path):
    p = tmp_path / "other.duckdb"
    duckdb.connect(str(p)).close()
    with pytest.raises(SchemaError, match="not a kvtrace warehouse"):
        Store(p, read_only=True)


def test_transaction_rolls_back_on_error(store):
    with pytest.raises(KeyboardInterrupt):
        with store.transaction():
            store.run(
                "INSERT INTO ingested_files (path, size, mtime_ns, format, ingested_at, rows_added, duplicates, lines_rejected) VALUES ('a', 1, 2, 'x', now(), 0, 0, 0)"
            )
            raise KeyboardInterrupt
    assert store.scalar("SELECT count(*) FROM ingested_files") == 0


def test_named_queries_have_titles():
    qs = list_queries()
    assert {"usage_window", "usage_bounds"} <= {q.name for q in qs}
    for q in qs:
        assert q.title and q.title != q.name, f"queries/{q.name}.sql needs a '-- title:' line"


def test_unknown_query_lists_known_ones():
    with pytest.raises(UnknownQuery, match="usage_window"):
        load_query("no_such_query")


def test_env_var_sets_default_path(monkeypatch, tmp_path):
    from kvtrace.store import default_db_path

    monkeypatch.setenv("KVTRACE_DB", str(tmp_path / "x.duckdb"))
    assert default_db_path() == tmp_path / "x.duckdb"


def test_reader_waits_for_a_writer_that_holds_the_file(db_path):
    import subprocess
    import sys
    import time

    Store(db_path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(db_path)!r}); print('held', flush=True); time.sleep(1.0)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t = time.monotonic()
        with Store(db_path, read_only=True) as s:
            assert s.scalar("SELECT count(*) FROM requests") == 0
        assert time.monotonic() - t < 10
        with pytest.raises(SchemaError, match="holds it for writing"):
            holder2 = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"import duckdb, time; c = duckdb.connect({str(db_path)!r}); "
                    "print('held', flush=True); time.sleep(3)",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                holder2.stdout.readline()
                Store(db_path, read_only=True, lock_wait_s=0.3)
            finally:
                holder2.kill()
                holder2.wait()
    finally:
        holder.wait(timeout=10)


def test_read_only_open_migrates_an_older_warehouse_first(db_path):
    with Store(db_path) as s:
        s.run("DELETE FROM _migrations WHERE version = (SELECT max(version) FROM _migrations)")
    with Store(db_path, read_only=True) as s:
        assert s.scalar("SELECT max(version) FROM _migrations") == max(
            v for v, _ in __import__("kvtrace.store.store", fromlist=["_migrations"])._migrations()
        )


def test_warehouse_with_primary_keys_is_rebuilt_without_them_rows_kept(db_path):
    # a warehouse written before migration 005: the tables of 001 (primary keys), migrations 1-4
    con = duckdb.connect(str(db_path))
    con.execute(load_query("schema/001_init").sql)
    con.execute(
        "CREATE TABLE _migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
        "applied_at TIMESTAMP NOT NULL DEFAULT now())"
    )
    for v, name in [
        (1, "001_init"),
        (2, "002_request_usage_view"),
        (3, "003_sessionless_metric_points"),
        (4, "004_sessionless_points_per_user"),
    ]:
        con.execute("INSERT INTO _migrations (version, name) VALUES (?, ?)", [v, name])
    con.execute(
        "INSERT INTO requests (request_key, ts, source, agent, input_tokens, output_tokens, "
        "ingested_from) VALUES ('req_1', TIMESTAMP '2026-03-02 10:00:00', 'otlp-log', 'claude-code', 7, 9, 'f:1')"
    )
    con.execute(
        "INSERT INTO metric_points (point_key, metric, series_key, temporality, ts, value, token_type, "
        "source, agent, ingested_from) VALUES ('p1', 'claude_code.token.usage', 's', 1, "
        "TIMESTAMP '2026-03-02 10:00:00', 5, 'input', 'otlp-metric', 'claude-code', 'f:2')"
    )
    assert (
        con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
            "AND table_name IN ('requests', 'metric_points')"
        ).fetchone()[0]
        == 2
    )
    con.close()
    with Store(db_path) as s:
        assert s.query("SELECT request_key, input_tokens, output_tokens FROM requests") == [("req_1", 7, 9)]
        assert s.query("SELECT point_key, value FROM metric_points") == [("p1", 5.0)]
        assert (
            s.scalar(
                "SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
                "AND table_name IN ('requests', 'metric_points')"
            )
            == 0
        )
        # the columns keep their NOT NULL constraints and defaults
        with pytest.raises(duckdb.ConstraintException):
            s.run("INSERT INTO requests (request_key, ts, source, agent) VALUES (NULL, now(), 'x', 'y')")
        assert s.scalar("SELECT count(*) FROM request_usage") == 1


def _partial_row_groups(s, table="requests"):
    return s.scalar(f"""SELECT count(*) FILTER (WHERE n < 122880) FROM (
        SELECT row_group_id, sum(count) AS n FROM pragma_storage_info('{table}')
        WHERE column_id = 0 AND segment_type <> 'VALIDITY' GROUP BY row_group_id)""")


def test_a_bulk_checkpoint_leaves_partial_row_groups_that_later_checkpoints_merge(db_path):
    def insert(s, batch, n):
        s.run(f"""INSERT INTO requests (request_key, ts, source, agent, output_tokens, ingested_from)
                  SELECT 'k{batch}-' || i, TIMESTAMP '2026-03-02' + INTERVAL (i) SECOND, 'otlp-log',
                         'claude-code', i % 7, 'f:' || i FROM range({n}) t(i)""")

    with Store(db_path) as s:
        s.run("SET threads = 2")
        insert(s, 0, 300000)  # parallel: a partial row group per thread
        s.checkpoint_bulk()
        assert s.scalar("SELECT current_setting('max_vacuum_tasks')") > 0  # restored
        left = _partial_row_groups(s)
        for batch in range(1, 21):  # small transactions, as the collector writes
            insert(s, batch, 50)
            s.run("CHECKPOINT")
        # merged by the later checkpoints' vacuum, and the small inserts did not pile up
        assert _partial_row_groups(s) <= max(left, 2)
        assert s.query("SELECT count(*), sum(output_tokens) FROM requests") == [
            (301000, sum(i % 7 for i in range(300000)) + 20 * sum(i % 7 for i in range(50)))
        ]


def test_a_capped_query_spills_where_the_warehouse_folder_cannot_hold_it(tmp_path):
    """DuckDB spills a capped sort beside the warehouse; with that place taken (a file where its
    folder would go, as on read-only media) a private folder takes the spill, and goes on close."""
    import glob
    import tempfile

    db = tmp_path / "w.duckdb"
    Store(db).close()
    (tmp_path / "w.duckdb.tmp").write_text("in the way")
    before = set(glob.glob(str(Path(tempfile.gettempdir()) / "kvtrace-spill-*")))
    with Store(db, read_only=True) as store:
        threads = store.scalar("SELECT current_setting('threads')")
        with store.memory_capped(64 * 2**20):
            assert store.scalar("SELECT current_setting('threads')") == 1  # 64 MB feeds one thread
            rows = store.scalar("SELECT count(*) FROM (SELECT range AS x FROM range(4000000) ORDER BY hash(range))")
        assert rows == 4_000_000
        assert store.scalar("SELECT current_setting('threads')") == threads
        assert store.scalar("SELECT count(*) FROM requests") == 0
    assert set(glob.glob(str(Path(tempfile.gettempdir()) / "kvtrace-spill-*"))) == before


def test_a_capped_query_that_runs_out_names_the_cap(tmp_path):
    """DuckDB's out-of-memory error inside a capped query becomes one kvtrace error."""
    from kvtrace.errors import KvtraceError

    with Store(tmp_path / "w.duckdb") as store:
        with pytest.raises(KvtraceError, match="more than the 16 MiB") as e:
            with store.memory_capped(16 * 2**20):
                store.scalar("SELECT length(string_agg(range::VARCHAR, ',')) FROM range(5000000)")
        assert "--since" in e.value.hint
        assert store.scalar("SELECT 1") == 1  # the connection is usable, its limit put back
