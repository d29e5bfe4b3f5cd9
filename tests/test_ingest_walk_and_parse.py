"""The folder walk of ingest, and the transcripts parser run again: same results as a first parse,
in a row, from threads beside each other and after a failure."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import kvtrace.ingest.claude_transcripts as ct
from kvtrace.ingest.walk import walk
from tests.transcript_records import assistant, main_file, user, write


def tree(root: Path) -> list[Path]:
    files = [
        root / n
        for n in (
            "b.jsonl",
            "a.jsonl",
            "a-b.json",
            "a/x.jsonl",
            "a/z/y.json",
            "a.x/q.jsonl",
            "c/d/e/f.jsonl.gz",
            "skip.txt",
            "c/skip.log",
        )
    ]
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


def test_walk_lists_what_os_walk_lists_in_path_order(tmp_path):
    tree(tmp_path)
    assert walk(str(tmp_path)) == reference_walk(tmp_path)
    unreadable = []
    assert walk(str(tmp_path / "no-such"), unreadable) == [] and unreadable[0][0] == str(tmp_path / "no-such")


def transcripts(root: Path, n: int, start: int = 0) -> list[Path]:
    return [
        write(main_file(root, f"s{i}"), [user(), assistant(msg=f"m{i}", req=f"r{i}", out=i + 1)])
        for i in range(start, start + n)
    ]


# -- the transcripts parser, again and again -----------------------------------------------------


def test_parses_in_a_row_agree_with_a_first_parse(tmp_path, monkeypatch):
    small = transcripts(tmp_path, 2)
    big = transcripts(tmp_path, 8, start=2)
    monkeypatch.setattr(ct, "_PARALLEL_BYTES", 0)
    assert ct.parse(big).requests.num_rows == 8  # four groups
    monkeypatch.undo()
    again = ct.parse(small)  # one group, after four
    assert sorted(again.requests.column("request_key").to_pylist()) == ["r0", "r1"]
    first = ct.parse(small)
    assert first.requests.to_pylist() == again.requests.to_pylist() and first.lines == again.lines


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
