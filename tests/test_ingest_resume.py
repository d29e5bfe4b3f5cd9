"""A grown OTLP JSON lines file is read from where its last ingest stopped; anything else whole."""

import gzip
import os

from kvtrace.ingest import ingest
from kvtrace.ingest import otlp_json
from kvtrace.store import Store
from tests.agent_exports import CODEX, lines as fixture_lines
from tests.otlp_records import event, logs_line


def write(path, ids, mode="w", tail=""):
    with open(path, mode) as fh:
        for i in ids:
            fh.write(logs_line(event(request_id=f"r{i}", output_tokens=i + 1)) + "\n")
        fh.write(tail)
    os.utime(path, ns=(os.stat(path).st_mtime_ns + 1_000_000,) * 2)  # coarse mtimes: make the change seen


def rows(store):
    return store.query(
        "SELECT request_id, output_tokens, split_part(ingested_from, ':', -1) FROM requests ORDER BY request_id"
    )


def test_a_grown_file_is_read_from_where_it_stopped(store, tmp_path, monkeypatch):
    f = tmp_path / "otel.jsonl"
    write(f, range(3))
    first = ingest(store, [f])
    assert (first.requests_added, first.files_resumed) == (3, 0)
    write(f, range(3, 5), mode="a")
    reads = []
    real = otlp_json._parse
    monkeypatch.setattr(otlp_json, "_parse", lambda *a, **k: reads.append(k.get("first")) or real(*a, **k))
    grown = ingest(store, [f])
    assert (grown.files_resumed, grown.requests_added, grown.duplicates_skipped) == (1, 2, 0)
    assert reads == [4]  # lines 4 and 5 only
    assert [r[2] for r in rows(store)] == ["1", "2", "3", "4", "5"]  # provenance numbers go on
    with Store(memory=True) as whole:  # the same as one read of the whole file
        ingest(whole, [f])
        assert rows(whole) == rows(store)
    assert ingest(store, [f]).files_skipped == 1  # unchanged again: not read at all


def test_a_torn_last_line_is_read_again_once_complete(store, tmp_path):
    f = tmp_path / "otel.jsonl"
    line = logs_line(event(request_id="r2", output_tokens=3))
    write(f, range(2), tail=line[:40])
    s = ingest(store, [f])
    assert s.requests_added == 2 and s.lines_rejected == 1 and "torn" in s.rejects[0]
    with open(f, "a") as fh:
        fh.write(line[40:] + "\n")
    write(f, [3], mode="a")
    s = ingest(store, [f])
    assert (s.files_resumed, s.requests_added, s.lines_rejected) == (1, 2, 0)
    assert [r[2] for r in rows(store)] == ["1", "2", "3", "4"]


def test_a_rewritten_file_is_read_whole(store, tmp_path):
    f = tmp_path / "otel.jsonl"
    write(f, range(3))
    ingest(store, [f])
    write(f, range(10, 15))  # longer, other bytes before the old end
    s = ingest(store, [f])
    assert (s.files_resumed, s.requests_added) == (0, 5)
    write(f, [20])  # shorter (rotated or truncated)
    s = ingest(store, [f])
    assert (s.files_resumed, s.requests_added) == (0, 1)
    assert len(rows(store)) == 9


def test_force_and_gzip_read_whole(store, tmp_path):
    f = tmp_path / "otel.jsonl"
    write(f, range(2))
    ingest(store, [f])
    write(f, [2], mode="a")
    s = ingest(store, [f], force=True)
    assert (s.files_resumed, s.requests_added, s.duplicates_skipped) == (0, 1, 2)
    g = tmp_path / "otel.jsonl.gz"
    with gzip.open(g, "wt") as fh:
        fh.write(logs_line(event(request_id="g1")) + "\n")
    ingest(store, [g])
    with gzip.open(g, "at") as fh:
        fh.write(logs_line(event(request_id="g2")) + "\n")
    s = ingest(store, [g])
    assert (s.files_resumed, s.requests_added, s.duplicates_skipped) == (0, 1, 1)


def test_a_file_read_before_the_ledger_kept_offsets_is_read_whole_once(store, tmp_path):
    f = tmp_path / "otel.jsonl"
    write(f, range(2))
    ingest(store, [f])
    store.run("UPDATE ingested_files SET read_to = NULL, lines_read = NULL, tail_sha256 = NULL")
    write(f, [2], mode="a")
    s = ingest(store, [f])
    assert (s.files_resumed, s.requests_added, s.duplicates_skipped) == (0, 1, 2)
    write(f, [3], mode="a")
    s = ingest(store, [f])
    assert (s.files_resumed, s.requests_added, s.duplicates_skipped) == (1, 1, 0)


def test_a_file_rotated_while_it_is_ingested_is_stored_and_its_successor_read_whole(store, tmp_path, monkeypatch):
    """The fingerprint comes from the bytes parsed, not from whatever has the name afterwards."""
    f = tmp_path / "otel.jsonl"
    write(f, range(3))
    real = otlp_json.parse

    def parse_then_rotate(path, *a, **k):
        parsed = real(path, *a, **k)
        os.rename(path, tmp_path / "otel.jsonl.1")  # the exporter rotates it
        write(f, range(10, 13))  # and starts a new file of the same length
        return parsed

    monkeypatch.setattr(otlp_json, "parse", parse_then_rotate)
    assert ingest(store, [f]).requests_added == 3
    monkeypatch.setattr(otlp_json, "parse", real)
    write(f, [13], mode="a")
    s = ingest(store, [f])
    assert (s.files_resumed, s.requests_added) == (0, 4)
    assert [r[0] for r in rows(store)] == ["r0", "r1", "r10", "r11", "r12", "r13", "r2"]


def test_a_span_lends_its_event_the_same_fields_in_one_read_as_across_reads(tmp_path):
    """Codex events lack duration and cost; their spans have them. Read together, or the spans
    appended later (a resumed read, merged into the stored rows), the stored rows are the same."""
    logs = b"".join(x + b"\n" for x in fixture_lines(CODEX[0], "logs"))
    traces = b"".join(x + b"\n" for x in fixture_lines(CODEX[0], "traces"))
    f = tmp_path / "codex.jsonl"
    q = (
        "SELECT request_key, ts, duration_ms, cost_usd, ttft_ms, input_tokens, output_tokens FROM requests "
        "WHERE agent = 'codex' ORDER BY request_key"
    )
    with Store(memory=True) as apart, Store(memory=True) as together:
        f.write_bytes(logs)
        ingest(apart, [f])
        with open(f, "ab") as fh:
            fh.write(traces)
        os.utime(f, ns=(os.stat(f).st_mtime_ns + 1_000_000,) * 2)
        assert ingest(apart, [f]).files_resumed == 1
        ingest(together, [f])
        got = apart.query(q)
        assert got == together.query(q) and got and all(r[2] is not None for r in got)
