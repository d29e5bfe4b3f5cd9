"""What a resident process keeps between ingests (kvtrace.ingest.resident), and the kept parse
connection of the transcripts parser: same results as a fresh process, and never stale."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import kvtrace.ingest.claude_transcripts as ct
from kvtrace.ingest import ingest, resident
from kvtrace.store import Store
from tests.transcript_records import agent_file, assistant, main_file, user, write

OLD = time.time() - 3600


@pytest.fixture
def kept():
    resident.enable()
    yield
    resident.enable(False)


def age(*paths: Path) -> None:
    """Make folders look last changed an hour ago (a listing of a folder that just changed is not kept)."""
    for p in paths:
        os.utime(p, (OLD, OLD))


def tree(root: Path) -> list[Path]:
    files = [root / n for n in ("b.jsonl", "a.jsonl", "a-b.json", "a/x.jsonl", "a/z/y.json", "a.x/q.jsonl",
                                "c/d/e/f.jsonl.gz", "skip.txt", "c/skip.log")]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}\n")
    os.symlink(root / "a", root / "link-to-folder")
    os.symlink(root / "b.jsonl", root / "link-to-file.jsonl")
    return files


def reference_walk(root: Path) -> list[str]:
    """What the pipeline walked before: os.walk (links to folders not entered), sorted as Paths."""
    out = []
    for folder, _dirs, names in os.walk(root):
        out.extend(Path(folder) / n for n in names if n.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")))
    return [str(p) for p in sorted(out)]


@pytest.mark.parametrize("keep", [False, True])
def test_walk_lists_what_os_walk_lists_in_path_order(tmp_path, keep):
    tree(tmp_path)
    st = resident.State() if keep else None
    assert resident.walk(str(tmp_path), st) == reference_walk(tmp_path)
    assert resident.walk(str(tmp_path), st) == reference_walk(tmp_path)     # from the kept listings


def test_kept_listings_see_new_removed_and_renamed_files(tmp_path):
    tree(tmp_path)
    age(*[p for p in tmp_path.rglob("*") if p.is_dir() and not p.is_symlink()], tmp_path)
    st = resident.State()
    resident.walk(str(tmp_path), st)
    assert str(tmp_path / "a") in st.folders[str(tmp_path)]        # an old, link-free folder is kept
    assert str(tmp_path) not in st.folders[str(tmp_path)]          # the root holds links: listed each time
    (tmp_path / "a" / "new.jsonl").write_text("{}\n")
    (tmp_path / "a" / "z" / "y.json").rename(tmp_path / "a" / "z" / "w.json")
    (tmp_path / "c" / "d" / "e" / "f.jsonl.gz").unlink()
    (tmp_path / "c" / "d" / "e").rmdir()
    (tmp_path / "a.x" / "deeper").mkdir()
    (tmp_path / "a.x" / "deeper" / "n.jsonl").write_text("{}\n")
    assert resident.walk(str(tmp_path), st) == reference_walk(tmp_path)
    assert str(tmp_path / "c" / "d" / "e") not in st.folders[str(tmp_path)]   # gone folders are forgotten


def test_a_listing_of_a_folder_that_just_changed_is_not_kept(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "a.jsonl").write_text("{}\n")
    st = resident.State()
    resident.walk(str(tmp_path), st)
    # A file added in the same clock tick would leave the folder's mtime as it was: not trusted.
    assert str(tmp_path / "s") not in st.folders[str(tmp_path)]


def transcripts(root: Path, n: int, start: int = 0) -> list[Path]:
    return [write(main_file(root, f"s{i}"), [user(), assistant(msg=f"m{i}", req=f"r{i}", out=i + 1)])
            for i in range(start, start + n)]


def test_kept_ledger_skips_unchanged_files_and_sees_grown_ones(store, tmp_path, kept):
    root = tmp_path / "t"
    transcripts(root, 3)
    (root / "projects" / "agent-x.meta.json").write_text('{"agentType": "x"}')
    first = ingest(store, [root / "projects"])
    assert (first.requests_added, first.unknown_records["file:unrecognized"]) == (3, 1)
    assert resident.state(store).ledger is not None
    again = ingest(store, [root / "projects"])
    assert (again.files_skipped, again.requests_added) == (4, 0)
    f = main_file(root, "s1")
    write(f, [user(), assistant(msg="m1", req="r1", out=2), assistant(msg="m9", req="r9", out=5)])
    grown = ingest(store, [root / "projects"])
    assert (grown.files_skipped, grown.requests_added, grown.duplicates_skipped) == (3, 1, 1)
    assert store.scalar("SELECT count(*) FROM ingested_files") == len(resident.state(store).ledger) == 5


def test_a_ledger_write_the_process_did_not_make_is_noticed(store, tmp_path, kept):
    root = tmp_path / "t"
    transcripts(root, 2)
    ingest(store, [root / "projects"])
    # Another writer forgets a file: the kept ledger must not keep skipping it.
    store.run("DELETE FROM ingested_files WHERE path LIKE '%s0.jsonl'")
    s = ingest(store, [root / "projects"])
    assert (s.files_skipped, s.duplicates_skipped) == (1, 1)


def test_a_failed_ingest_forgets_what_was_kept(store, tmp_path, kept, monkeypatch):
    import kvtrace.ingest.pipeline as pl

    root = tmp_path / "t"
    transcripts(root, 2)
    ingest(store, [root / "projects"])
    transcripts(root, 1, start=2)
    monkeypatch.setattr(pl, "_merge", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        ingest(store, [root / "projects"])
    assert resident.state(store).ledger is None
    monkeypatch.undo()
    assert ingest(store, [root / "projects"]).requests_added == 1


def test_kept_and_fresh_ingests_store_the_same(tmp_path, kept, monkeypatch):
    """Rounds of new, grown and subagent files: a resident process's warehouse equals one built
    by fresh processes (nothing kept)."""
    root = tmp_path / "t"
    kept_store, fresh_store = Store(memory=True), Store(memory=True)
    try:
        for r in range(4):
            transcripts(root, 2, start=2 * r)
            write(agent_file(root, f"a{r}"), [assistant(msg=f"m{2 * r}", req=f"x{r}", out=99, sidechain=True,
                                                        agent=f"a{r}")])
            write(main_file(root, "s0"), [assistant(msg="m0", req="r0", out=1 + r)])
            a = ingest(kept_store, [root / "projects"])
            # keeping off for the fresh store only: enable(False) would drop what the kept one has
            monkeypatch.setattr(resident, "_enabled", False)
            b = ingest(fresh_store, [root / "projects"])
            monkeypatch.setattr(resident, "_enabled", True)
            assert a.to_dict() == b.to_dict()
        q = "SELECT * EXCLUDE (attributes) FROM requests ORDER BY request_key"
        assert kept_store.query(q) == fresh_store.query(q)
    finally:
        kept_store.close()
        fresh_store.close()


# -- the transcripts parser's kept connection ----------------------------------------------------

def test_parses_in_a_row_and_beside_each_other_agree_with_a_first_parse(tmp_path, monkeypatch):
    small = transcripts(tmp_path, 2)
    big = transcripts(tmp_path, 8, start=2)
    monkeypatch.setattr(ct, "_PARALLEL_BYTES", 0)
    assert ct.parse(big).requests.num_rows == 8       # four groups
    monkeypatch.undo()
    again = ct.parse(small)                            # one group, on the same kept connection
    assert sorted(again.requests.column("request_key").to_pylist()) == ["r0", "r1"]
    # While one parse holds the kept connection, another gets its own.
    with ct._DB_LOCK:
        beside = ct.parse(small)
    assert beside.requests.to_pylist() == again.requests.to_pylist() and beside.lines == again.lines


def test_a_parse_after_a_failed_one_starts_clean(tmp_path, monkeypatch):
    files = transcripts(tmp_path, 3)
    real = ct._collect

    def fail(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(ct, "_collect", fail)
    with pytest.raises(KeyboardInterrupt):
        ct.parse(files)
    monkeypatch.setattr(ct, "_collect", real)
    assert ct.parse(files[:1]).requests.column("request_key").to_pylist() == ["r0"]
    assert not ct._DB_LOCK.locked()


def test_parse_from_threads_one_at_a_time_or_beside(tmp_path):
    files = transcripts(tmp_path, 4)
    want = sorted(ct.parse(files).requests.column("request_key").to_pylist())
    got, errors = [], []

    def run():
        try:
            got.append(sorted(ct.parse(files).requests.column("request_key").to_pylist()))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == [want] * 4



@pytest.mark.parametrize("cap", [0, 10**6])
def test_stored_keys_never_let_a_copy_in_twice(store, tmp_path, kept, monkeypatch, cap):
    """A batch that shares a message id (a subagent's replay under a new request id) or a
    session with stored rows is merged, whether the kept keys are there (cap) or not."""
    monkeypatch.setattr(resident, "KEY_INDEX_MAX_ROWS", cap)
    root = tmp_path / "t"
    write(main_file(root, "s0"), [assistant(msg="m0", req="r0", out=5)])
    ingest(store, [root / "projects"])
    resident.warm(store)
    assert (resident.state(store).keys is None) == (cap == 0)
    write(agent_file(root, "a1"), [assistant(msg="m0", req="replay", out=5, sidechain=True, agent="a1")])
    s = ingest(store, [root / "projects"])
    assert (s.requests_added, s.duplicates_skipped) == (0, 1)
    # A row another writer added is noticed (the row count is not what the process expects).
    store.run("INSERT INTO requests BY NAME SELECT * REPLACE ('r9' AS request_key, 'm9' AS message_id) "
              "FROM requests LIMIT 1")
    write(main_file(root, "s9"), [assistant(msg="m9", req="r9", out=7)])
    s = ingest(store, [root / "projects"])
    assert (s.requests_added, s.duplicates_skipped) == (0, 1)
    assert store.scalar("SELECT count(*) FROM requests") == 2
