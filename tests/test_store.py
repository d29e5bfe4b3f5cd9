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
        s.run("INSERT INTO ingested_files VALUES ('a', 1, 2, 'otlp-json', now(), 0, 0, 0)")
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
            store.run("INSERT INTO ingested_files VALUES ('a', 1, 2, 'x', now(), 0, 0, 0)")
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
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(db_path)!r}); "
                               "print('held', flush=True); time.sleep(1.0)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t = time.monotonic()
        with Store(db_path, read_only=True) as s:
            assert s.scalar("SELECT count(*) FROM requests") == 0
        assert time.monotonic() - t < 10
        with pytest.raises(SchemaError, match="holds it for writing"):
            holder2 = subprocess.Popen([sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(db_path)!r}); "
                                        "print('held', flush=True); time.sleep(3)"], stdout=subprocess.PIPE, text=True)
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
        assert s.scalar("SELECT max(version) FROM _migrations") == max(v for v, _ in __import__(
            "kvtrace.store.store", fromlist=["_migrations"])._migrations())
