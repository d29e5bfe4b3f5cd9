"""Many small OTLP files are read together, one parse and one transaction per batch, with the
same rows as one file of the same lines, a ledger row per file, and the rule for a bad file:
the files before it are stored, its error is raised as if alone."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kvtrace.errors import BadTraceInput
from kvtrace.ingest import ingest
from kvtrace.store import Store

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "otlp" / "logs.jsonl.gz"


@pytest.fixture(scope="module")
def sample_lines() -> list[bytes]:
    return gzip.decompress(SAMPLE.read_bytes()).splitlines(keepends=True)[:120]


def _split(folder: Path, lines: list[bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, line in enumerate(lines):
        out.append(folder / f"seg-{i:04d}.jsonl")
        out[-1].write_bytes(line)
    return out


def _rows(store) -> list[tuple]:
    return store.query(
        "SELECT request_key, ts, session_id, model, input_tokens, cache_read_tokens, output_tokens, "
        "split_part(ingested_from, ':', -1) FROM requests ORDER BY request_key"
    )


def test_small_files_give_the_rows_of_one_file_in_one_transaction(store, tmp_path, sample_lines):
    files = _split(tmp_path / "seg", sample_lines)
    s = ingest(store, [tmp_path / "seg"])
    assert s.files == len(files) and s.formats == {"otlp-json": len(files)}
    one = tmp_path / "one.jsonl"
    one.write_bytes(b"".join(sample_lines))
    with Store(memory=True) as ref:
        ingest(ref, [one])
        assert [r[:-1] for r in _rows(store)] == [r[:-1] for r in _rows(ref)]
    assert {r[-1] for r in _rows(store)} == {"1"}  # line 1 of its own file
    assert (
        store.scalar(
            "SELECT count(*) FROM requests WHERE NOT starts_with(ingested_from, ?)", [str(tmp_path / "seg" / "seg-")]
        )
        == 0
    )
    ledger = store.query(
        "SELECT count(*), count(DISTINCT path), count(DISTINCT ingested_at), sum(rows_added) FROM ingested_files"
    )[0]
    assert ledger == (len(files), len(files), 1, s.requests_added)
    again = ingest(store, [tmp_path / "seg"])
    assert (again.files_skipped, again.requests_added) == (len(files), 0)


def test_files_added_to_a_folder_count_once_whatever_the_batches(store, tmp_path, sample_lines):
    files = _split(tmp_path / "seg", sample_lines)
    for f in files[60:]:
        f.rename(tmp_path / f.name)
    first = ingest(store, [tmp_path / "seg"])
    for f in files[60:]:
        (tmp_path / f.name).rename(f)
    second = ingest(store, [tmp_path / "seg"])
    assert second.files_skipped == 60
    total = store.scalar("SELECT count(*) FROM requests")
    one = tmp_path / "one.jsonl"
    one.write_bytes(b"".join(sample_lines))
    assert ingest(store, [one]).requests_added == 0
    assert total == first.requests_added + second.requests_added > 0


def test_a_bad_file_under_strict_keeps_the_files_before_it(store, tmp_path, sample_lines):
    files = _split(tmp_path / "seg", sample_lines[:40])
    files[25].write_bytes(sample_lines[25] + b"not json\n")
    with pytest.raises(BadTraceInput) as e:
        ingest(store, [tmp_path / "seg"], strict=True)
    assert f"{files[25]}:2" in str(e.value)
    stored = {r[0] for r in store.query("SELECT path FROM ingested_files")}
    assert stored == {str(f) for f in files[:25]}
    assert store.scalar("SELECT count(DISTINCT split_part(ingested_from, ':', 1)) FROM requests") <= 25


def test_a_bad_line_and_a_torn_file_in_a_batch_are_named_by_file_and_line(store, tmp_path, sample_lines):
    files = _split(tmp_path / "seg", sample_lines[:30])
    files[7].write_bytes(sample_lines[7] + b"not json\n")
    files[12].write_bytes(sample_lines[12] + sample_lines[13][:50])  # a last line still being written
    s = ingest(store, [tmp_path / "seg"])
    assert s.rejects == [
        f"{files[7]}:2: invalid JSON",
        f"{files[12]}:2: invalid JSON: the last line is torn (no newline at the end; was a writer interrupted?)",
    ]
    one = tmp_path / "one.jsonl"
    one.write_bytes(b"".join(sample_lines[:30]))
    with Store(memory=True) as ref:
        ingest(ref, [one])
        assert store.scalar("SELECT count(*) FROM requests") == ref.scalar("SELECT count(*) FROM requests")
