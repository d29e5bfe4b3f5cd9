"""The ledger remembers a file per format: a read under a wrong --format neither hides the file
from later ingests nor passes in silence."""

from __future__ import annotations

from pathlib import Path

import duckdb

from kvtrace.ingest import ingest
from kvtrace.store import Store
from tests.transcript_records import assistant, main_file, write

SCHEMA = Path(__file__).parent.parent / "queries" / "schema"


def _transcript(tmp_path) -> Path:
    return write(main_file(tmp_path), [assistant(msg="m1", req="r1"), assistant(msg="m2", req="r2")])


def test_a_wrong_format_does_not_hide_the_file_from_a_plain_ingest(store, tmp_path):
    f = _transcript(tmp_path)
    wrong = ingest(store, [f], format="codex-rollout")
    assert wrong.requests_added == 0
    assert wrong.warnings == [
        f"{f}: nothing read as codex-rollout (it looks like claude-transcript); "
        "check --input-format, or ingest without it to detect the format"
    ]
    again = ingest(store, [f], format="codex-rollout")  # that read is remembered
    assert again.files_skipped == 1 and not again.warnings
    plain = ingest(store, [f])
    assert (plain.files_skipped, plain.requests_added, plain.warnings) == (0, 2, [])
    assert ingest(store, [f]).files_skipped == 1
    assert ingest(store, [f], format="claude-transcript").files_skipped == 1  # read as that already
    assert store.scalar("SELECT list(format ORDER BY format) FROM ingested_files") == [
        "claude-transcript",
        "codex-rollout",
    ]


def test_a_forced_right_format_is_remembered_for_plain_ingests(store, tmp_path):
    f = _transcript(tmp_path)
    assert ingest(store, [f], format="claude-transcript").requests_added == 2
    assert ingest(store, [f]).files_skipped == 1
    assert store.scalar("SELECT count(*) FROM ingested_files") == 1


def test_a_wrong_format_then_the_right_one_in_one_store(tmp_path):
    f = _transcript(tmp_path)
    with Store(tmp_path / "kv.duckdb") as s:
        ingest(s, [f], format="gemini-chat")
        assert ingest(s, [f]).requests_added == 2
        assert ingest(s, [f]).files_skipped == 1


def test_ledger_rows_of_an_older_warehouse_are_kept_as_detected(tmp_path):
    f = _transcript(tmp_path)
    db = tmp_path / "old.duckdb"
    with Store(db) as s:  # a warehouse of the previous schema, with one ledger row
        ingest(s, [f])
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE ingested_files")
    for sql in sorted(SCHEMA.glob("00[1-6]_*.sql")):
        if sql.name.startswith(("001", "006")):
            con.execute(sql.read_text())
    con.execute("DELETE FROM _migrations WHERE version >= 7")
    st = f.stat()
    con.execute(
        "INSERT INTO ingested_files (path, size, mtime_ns, format, ingested_at, rows_added, duplicates, "
        "lines_rejected) VALUES (?, ?, ?, 'claude-transcript', now(), 2, 0, 0)",
        [str(f.resolve()), st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)],
    )
    con.close()
    with Store(db) as s:
        assert s.scalar("SELECT list((format, forced)) FROM ingested_files") == [("claude-transcript", False)]
        assert ingest(s, [f]).files_skipped == 1
