"""The pipeline's guarantees, on a fake format: idempotence, transactions, strictness, skipping."""

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.errors import BadTraceInput, KvtraceError, UnknownFormat
from kvtrace.ingest import ingest
from kvtrace.ingest.formats import FORMATS, Format, sniff
from kvtrace.ingest.pipeline import IngestSummary, _merge
from kvtrace.store import Store
from tests.builders import parsed


@pytest.fixture(autouse=True)
def fake_format(monkeypatch):
    monkeypatch.setitem(FORMATS, "fake", Format("fake", "tests.fake_format:parse", False, "test lines"))


def write_lines(path, objs, raw_tail=None):
    with open(path, "w") as fh:
        for o in objs:
            fh.write(json.dumps(o) + "\n")
        if raw_tail:
            fh.write(raw_tail)
    return path


def counts(store):
    return store.scalar("SELECT count(*) FROM requests"), store.scalar(
        "SELECT coalesce(sum(output_tokens),0) FROM requests"
    )


def test_reingest_adds_nothing_even_with_force(store, tmp_path):
    f = write_lines(tmp_path / "a.jsonl", [{"key": f"r{i}", "minute": i, "out": i + 1} for i in range(5)])
    s1 = ingest(store, [f], format="fake")
    assert (s1.requests_added, s1.duplicates_skipped) == (5, 0)
    s2 = ingest(store, [f], format="fake")
    assert s2.files_skipped == 1 and s2.requests_added == 0
    s3 = ingest(store, [f], format="fake", force=True)
    assert (s3.requests_added, s3.duplicates_skipped) == (0, 5)
    assert counts(store) == (5, 15)


def test_changed_file_is_reread_and_only_new_rows_count(store, tmp_path):
    f = write_lines(tmp_path / "a.jsonl", [{"key": "r1", "minute": 1, "out": 1}])
    ingest(store, [f], format="fake")
    write_lines(f, [{"key": "r1", "minute": 1, "out": 1}, {"key": "r2", "minute": 2, "out": 2}])
    s = ingest(store, [f], format="fake")
    assert (s.requests_added, s.duplicates_skipped) == (1, 1)


def test_bad_lines_are_reported_with_file_and_line(store, tmp_path):
    f = write_lines(
        tmp_path / "a.jsonl",
        [{"key": "r1", "minute": 1, "out": 1}],
        raw_tail='{"key": "r2", "minute": 2, "out": "x"}\n{torn',
    )
    s = ingest(store, [f], format="fake")
    assert s.requests_added == 1 and s.lines_rejected == 2
    assert s.rejects[0].startswith(f"{f}:2: field 'out'")
    assert s.rejects[1].startswith(f"{f}:3:")


def test_strict_makes_a_bad_line_fatal_and_stores_nothing_of_the_file(store, tmp_path):
    f = write_lines(tmp_path / "a.jsonl", [{"key": "r1", "minute": 1, "out": 1}], raw_tail="nope\n")
    with pytest.raises(BadTraceInput, match=r"a\.jsonl:2"):
        ingest(store, [f], format="fake", strict=True)
    assert counts(store) == (0, 0)
    assert store.scalar("SELECT count(*) FROM ingested_files") == 0


def test_interrupted_file_leaves_nothing_half_written(store, tmp_path, monkeypatch):
    good = write_lines(tmp_path / "a.jsonl", [{"key": "r1", "minute": 1, "out": 1}])
    bad = write_lines(tmp_path / "b.jsonl", [{"key": "r2", "minute": 2, "out": 2}])
    import kvtrace.ingest.pipeline as pl

    real = pl._merge

    def boom(store_, parsed_, summary):
        real(store_, parsed_, summary)
        if "r2" in parsed_.requests.column("request_key").to_pylist():
            raise KeyboardInterrupt  # Ctrl-C after rows were written inside the transaction

    monkeypatch.setattr(pl, "_merge", boom)
    summary = IngestSummary()
    with pytest.raises(KeyboardInterrupt):
        ingest(store, [good, bad], format="fake", summary=summary)
    assert store.query("SELECT request_key FROM requests") == [("r1",)]
    assert store.scalar("SELECT count(*) FROM ingested_files") == 1  # b.jsonl may be retried
    # the caller's summary counts what is stored and names what was rolled back
    assert (summary.files, summary.files_stored, summary.requests_added) == (2, 1, 1)
    assert summary.files_pending == [str(bad)]


def test_gzip_folder_glob_and_stdin(store, tmp_path, monkeypatch):
    d = tmp_path / "in"
    d.mkdir()
    write_lines(d / "a.jsonl", [{"key": "r1", "minute": 1, "out": 1}])
    with gzip.open(d / "b.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"key": "r2", "minute": 2, "out": 2}) + "\n")
    (d / "notes.txt").write_text("ignored")
    s = ingest(store, [d, str(tmp_path / "in" / "*.jsonl")], format="fake")
    assert s.files == 2 and s.requests_added == 2
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"key": "r3", "minute": 3, "out": 3}\n')))
    s = ingest(store, ["-"], format="fake")
    assert s.requests_added == 1


def test_missing_input_and_unknown_format(store, tmp_path):
    with pytest.raises(KvtraceError, match="no such file"):
        ingest(store, [tmp_path / "nope.jsonl"])
    f = tmp_path / "x.jsonl"
    f.write_text('{"hello": 1}\n')
    with pytest.raises(UnknownFormat, match="--input-format"):
        sniff(f)
    with pytest.raises(UnknownFormat, match="choose one of"):
        ingest(store, [f], format="nonsense")


def test_sniffing_known_shapes(tmp_path):
    cases = {
        "otlp-json": {"resourceLogs": []},
        "mooncake": {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
        "bailian": {"chat_id": 1, "timestamp": 0.5, "input_length": 10, "hash_ids": [1]},
        "claude-transcript": {"type": "summary", "leafUuid": "x"},
    }
    for fmt, obj in cases.items():
        f = tmp_path / f"{fmt}.jsonl"
        f.write_text("\n" + json.dumps(obj) + "\n")
        assert sniff(f) == fmt


# -- merge rules -----------------------------------------------------------------------------------


def merge(store, *rows):
    s = IngestSummary()
    with store.transaction():
        _merge(store, parsed(*rows), s)
    return s


def test_event_then_transcript_copy_fills_split_and_keeps_one_row(store):
    merge(
        store,
        dict(
            request_key="req_1", request_id="req_1", ts=1, cache_write_unknown_tokens=50, ttft_ms=700.0, output_tokens=9
        ),
    )
    s = merge(
        store,
        dict(
            request_key="req_1",
            request_id="req_1",
            message_id="msg_1",
            ts=1,
            cache_write_5m_tokens=30,
            cache_write_1h_tokens=20,
            output_tokens=9,
        ),
    )
    assert (s.requests_added, s.duplicates_skipped) == (0, 1)
    assert store.query(
        "SELECT message_id, cache_write_5m_tokens, cache_write_1h_tokens, cache_write_unknown_tokens, ttft_ms "
        "FROM requests"
    ) == [("msg_1", 30, 20, 0, 700.0)]


def test_two_copies_matching_one_stored_row_fill_it_as_the_main_copy_would(store):
    """A stored event, then a transcript batch holding a main-thread copy (by request id) and a
    sidechain copy (by message id) of it: the main copy is the one that fills the stored row."""
    merge(
        store,
        dict(
            request_key="req_1",
            request_id="req_1",
            message_id="msg_1",
            source="otlp-log",
            ts=1,
            thread_id="main",
            cache_write_unknown_tokens=120,
            output_tokens=9,
        ),
    )
    s = merge(
        store,
        dict(
            request_key="req_1",
            request_id="req_1",
            source="claude-transcript",
            ts=1,
            thread_id="main",
            cache_write_unknown_tokens=120,
            output_tokens=9,
        ),
        dict(
            request_key="msg_1",
            message_id="msg_1",
            source="claude-transcript",
            ts=1,
            thread_id="agent-a",
            is_sidechain=True,
            cache_write_5m_tokens=120,
            output_tokens=9,
        ),
    )
    assert (s.requests_added, s.duplicates_skipped) == (0, 2)
    assert store.query(
        "SELECT thread_id, is_sidechain, cache_write_5m_tokens, cache_write_unknown_tokens FROM requests"
    ) == [("main", False, 0, 120)]


def test_sidechain_replay_loses_to_main_copy_in_either_order(store):
    side = dict(
        request_key="req_b",
        request_id="req_b",
        message_id="msg_1",
        ts=1,
        output_tokens=5,
        is_sidechain=True,
        thread_id="agent-1",
    )
    main = dict(request_key="req_a", request_id="req_a", message_id="msg_1", ts=1, output_tokens=5, is_sidechain=False)
    merge(store, side)
    s = merge(store, main)
    assert s.requests_added == 0 and s.duplicates_skipped == 1
    assert store.query("SELECT request_key, thread_id FROM requests") == [("req_a", "main")]
    store.run("DELETE FROM requests")
    merge(store, main)
    merge(store, side)
    assert store.query("SELECT request_key FROM requests") == [("req_a",)]


def test_larger_output_wins_within_and_across_batches(store):
    s = merge(
        store,
        dict(request_key="m1", message_id="m1", ts=1, output_tokens=1),
        dict(request_key="m1", message_id="m1", ts=1, output_tokens=40),
    )
    assert s.requests_added == 1 and s.duplicates_skipped == 1
    merge(store, dict(request_key="m1", message_id="m1", ts=1, output_tokens=300))
    merge(store, dict(request_key="m1", message_id="m1", ts=1, output_tokens=2))
    assert store.query("SELECT output_tokens FROM requests") == [(300,)]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 50), st.booleans()), max_size=12),
    st.integers(1, 4),
)
def test_any_split_into_batches_and_repeats_gives_the_same_rows(rows, nbatches):
    """Property: the stored result depends on the set of copies, not on batching or repetition."""

    def run(batches):
        s = Store(memory=True)
        for b in batches:
            if b:
                with s.transaction():
                    _merge(s, parsed(*b), IngestSummary())
        out = s.query("SELECT count(*), coalesce(sum(output_tokens), 0) FROM requests")[0]
        s.close()
        return out

    copies = [
        dict(
            request_key=f"m{m}",
            message_id=f"m{m}",
            ts=m,
            output_tokens=o,
            is_sidechain=sc,
            thread_id="x" if sc else "main",
        )
        for m, _, o, sc in rows
    ]
    best = run([copies])
    batches = [copies[i::nbatches] for i in range(nbatches)]
    assert run(batches) == best
    assert run(batches + batches[::-1]) == best
    expected_rows = len({c["request_key"] for c in copies})
    assert best[0] == expected_rows


@pytest.mark.parametrize("event_first", [True, False])
def test_event_and_transcript_of_a_subagent_request_merge_in_either_order(store, event_first):
    """An OTLP event is the original request, not a 'main copy': a transcript of the same request
    from a subagent file enriches it (split, thread) instead of losing to it."""
    event = dict(
        request_key="req_9",
        request_id="req_9",
        source="otlp-log",
        ts=1,
        query_source="subagent",
        cache_write_unknown_tokens=80,
        output_tokens=12,
        ttft_ms=400.0,
        cost_usd=0.01,
    )
    transcript = dict(
        request_key="req_9",
        request_id="req_9",
        message_id="msg_9",
        source="claude-transcript",
        ts=1,
        query_source="subagent",
        thread_id="agent-a1",
        is_sidechain=True,
        cache_write_5m_tokens=80,
        output_tokens=12,
    )
    for row in [event, transcript] if event_first else [transcript, event]:
        merge(store, row)
    assert store.query(
        "SELECT count(*), sum(output_tokens), sum(cache_write_5m_tokens), sum(cache_write_unknown_tokens), "
        "any_value(thread_id), any_value(ttft_ms), any_value(message_id) FROM requests"
    ) == [(1, 12, 80, 0, "agent-a1", 400.0, "msg_9")]


def test_unrecognized_file_in_a_folder_is_counted_but_named_one_is_an_error(store, tmp_path):
    d = tmp_path / "codex"
    d.mkdir()
    write_lines(d / "a.jsonl", [{"resourceLogs": []}])
    (d / "history.jsonl").write_text('{"session_id": "x", "text": "hello"}\n')
    s = ingest(store, [d])
    assert s.unknown_records == {"file:unrecognized": 1}
    with pytest.raises(UnknownFormat, match="history.jsonl"):
        ingest(store, [d / "history.jsonl"])


def test_event_after_its_span_sets_model_and_query_source(store):
    merge(
        store,
        dict(
            request_key="req_5",
            request_id="req_5",
            source="otlp-span",
            ts=1,
            model="claude-opus-4-8[1m]",
            query_source=None,
            ttft_ms=321.0,
            output_tokens=4,
        ),
    )
    merge(
        store,
        dict(
            request_key="req_5",
            request_id="req_5",
            source="otlp-log",
            ts=1,
            model="claude-opus-4-8",
            query_source="subagent",
            thread_id="general-purpose",
            output_tokens=4,
        ),
    )
    assert store.query(
        "SELECT count(*), any_value(model), any_value(query_source), any_value(thread_id), "
        "any_value(ttft_ms) FROM requests"
    ) == [(1, "claude-opus-4-8", "subagent", "general-purpose", 321.0)]


def test_unrecognized_files_are_not_sniffed_again_until_they_change(store, tmp_path, monkeypatch):
    d = tmp_path / "tree"
    d.mkdir()
    write_lines(d / "a.jsonl", [{"resourceLogs": []}])
    side = d / "agent-1.meta.json"
    side.write_text('{"agentType": "general-purpose"}\n')
    assert ingest(store, [d]).unknown_records == {"file:unrecognized": 1}
    import kvtrace.ingest.pipeline as pl

    sniffed = []
    monkeypatch.setattr(pl, "sniff", lambda p: sniffed.append(p) or "otlp-json")
    s = ingest(store, [d])
    assert sniffed == [] and s.files_skipped == 2
    side.write_text('{"agentType": "general-purpose", "more": 1}\n')
    ingest(store, [d])
    assert sniffed == [side]


@pytest.mark.parametrize("event_has_id", [True, False])
def test_event_and_transcript_without_a_shared_id_are_one_request(store, event_has_id):
    """A gateway drops requestId from transcripts, or an event lacks request_id: the two copies still
    merge (same session, same prompt-side counts, close in time) instead of counting twice."""
    event = dict(
        request_key="req_7" if event_has_id else "otlp:abc",
        request_id="req_7" if event_has_id else None,
        source="otlp-log",
        ts=2,
        session_id="s9",
        input_tokens=3,
        cache_read_tokens=900,
        cache_write_unknown_tokens=120,
        output_tokens=40,
        ttft_ms=250.0,
    )
    transcript = dict(
        request_key="msg_7",
        message_id="msg_7",
        request_id=None if event_has_id else "req_8",
        source="claude-transcript",
        ts=1,
        session_id="s9",
        input_tokens=3,
        cache_read_tokens=900,
        cache_write_5m_tokens=120,
        output_tokens=40,
    )
    other_turn = dict(transcript, request_key="msg_8", message_id="msg_8", cache_read_tokens=1020, ts=3)
    merge(store, event)
    s = merge(store, transcript, other_turn)
    assert s.requests_added == 1 and s.duplicates_skipped == 1
    assert store.query(
        "SELECT count(*), sum(cache_write_5m_tokens), sum(cache_write_unknown_tokens) FROM requests"
    ) == [(2, 120 + 120, 0)]


def test_a_file_rewritten_in_place_with_its_old_mtime_is_read_again(store, tmp_path):
    import os

    f = write_lines(tmp_path / "a.jsonl", [{"key": "r1", "minute": 1, "out": 1}])
    st = os.stat(f)
    ingest(store, [f], format="fake")
    write_lines(f, [{"key": "r2", "minute": 1, "out": 2}])  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(f).st_size == st.st_size
    assert ingest(store, [f], format="fake").requests_added == 1
