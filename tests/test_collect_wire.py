"""Collector wire handling: decompression caps, decoding, protobuf -> OTLP JSON, segments."""

from __future__ import annotations

import base64
from pathlib import Path
import gzip
import time
import os
import zlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.collect import otlp, segments
from kvtrace.collect.pbjson import protobuf_to_json_line
from tests.collect_support import (
    api_request_json,
    gzip_bomb,
    logs_request_json,
    logs_request_pb,
    reasons,
    receive,
    sdk_payloads,
)

LOGS = otlp.SIGNALS["logs"]


# -- decompression ---------------------------------------------------------------------------


def test_gzip_bomb_stops_at_the_limit():
    bomb = gzip_bomb(50 << 20)
    assert len(bomb) < 100_000
    with pytest.raises(otlp.TooLarge):
        otlp.decompress(bomb, "gzip", 1 << 20)


@pytest.mark.parametrize(
    "encoding,compress",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some clients send it
        ("identity", lambda b: b),
        (None, lambda b: b),
    ],
)
def test_decompress_round_trips(encoding, compress):
    data = os.urandom(1000) + b"x" * 5000
    assert otlp.decompress(compress(data), encoding, 10_000) == data


def test_decompress_exact_limit_and_multi_member_gzip():
    data = b"a" * 1000
    assert otlp.decompress(gzip.compress(data), "gzip", 1000) == data
    with pytest.raises(otlp.TooLarge):
        otlp.decompress(gzip.compress(data), "gzip", 999)
    assert otlp.decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"
    # members spanning the pieces the decompressor is fed, and trailing zero padding
    big = [bytes([65 + i]) * 100_000 for i in range(3)]
    body = b"".join(gzip.compress(b, compresslevel=0) for b in big) + b"\x00" * 10
    assert otlp.decompress(body, "gzip", 1 << 20) == b"".join(big)


def test_a_body_of_many_gzip_members_is_refused_at_once():
    """Tiny members cost a decompressor each: past MAX_GZIP_MEMBERS the body is refused, in time
    that does not grow with the square of the members (a 2 MiB body of empty members took 11 s)."""
    n = otlp.MAX_GZIP_MEMBERS
    assert otlp.decompress(gzip.compress(b"x") * n, "gzip", 1000) == b"x" * n
    body = gzip.compress(b"") * 100_000
    t = time.monotonic()
    with pytest.raises(otlp.BadPayload, match="members"):
        otlp.decompress(body, "gzip", 16 << 20)
    assert time.monotonic() - t < 1


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(b"x" * 100, mtime=0)[:-10], b""])
def test_corrupt_or_truncated_gzip_is_bad_payload(body):
    if body == b"":
        assert otlp.decompress(body, "gzip", 10) == b""
        return
    with pytest.raises(otlp.BadPayload):
        otlp.decompress(body, "gzip", 10_000)


def test_unknown_encoding():
    with pytest.raises(otlp.UnsupportedEncoding):
        otlp.decompress(b"x", "br", 10)


# -- JSON ------------------------------------------------------------------------------------


def test_json_counts_and_keeps_compact_body():
    body = orjson.dumps(
        logs_request_json([api_request_json("req_1", (1, 2, 3, 4)), api_request_json("req_2", (5, 6, 7, 8))])
    )
    b = otlp.decode_json(LOGS, body)
    assert (b.records, b.frame_kind) == (2, otlp.JSON_FRAME)
    assert b.payload == body


def test_a_duplicated_signal_key_stores_what_was_counted():
    """msgspec keeps the last of two equal keys and DuckDB's reader the first: the line stored is
    rebuilt from the value counted, so what was acknowledged is what ingest reads."""
    from kvtrace.ingest.otlp_json import parse_lines

    one = orjson.dumps(logs_request_json([api_request_json("req_a", (1, 2, 3, 4))]))[len(b'{"resourceLogs":') : -1]
    two = orjson.dumps(logs_request_json([api_request_json(f"req_{i}", (1, 2, 3, 4)) for i in "bc"]))[
        len(b'{"resourceLogs":') : -1
    ]
    for first, last, want in ((one, b"[]", []), (b"[]", one, ["req_a"]), (one, two, ["req_b", "req_c"])):
        b = otlp.decode_json(LOGS, b'{"resourceLogs":%s,"resourceLogs":%s}' % (first, last))
        assert b.records == len(want)
        if want:
            assert b.payload.count(b'"resourceLogs"') == 1
            assert sorted(parse_lines(b.payload, "seg").requests.column("request_id").to_pylist()) == want


def test_json_records_ingest_rejects_are_stored_for_ingest_to_judge():
    """The receiver keeps every record of a decodable request; the ingest of the segment rejects
    the one whose token count is not a count, naming it, and stores the others."""
    from kvtrace.ingest.otlp_json import parse_lines

    recs = [api_request_json("req_ok", (1, 2, 3, 4)), api_request_json("req_bad", (1, 2, 3, 4))]
    recs[1]["attributes"][-1]["value"] = {"stringValue": "many"}
    recs.append(api_request_json("req_str", (1, 2, 3, 4), as_string=True))  # numeric strings are fine
    body = orjson.dumps(logs_request_json(recs))
    b = otlp.decode_json(LOGS, body)
    assert (b.records, b.payload) == (3, body)
    assert otlp.success_body(LOGS, otlp.JSON_TYPE) == b"{}"
    parsed = parse_lines(b.payload, "seg")
    assert sorted(parsed.requests.column("request_id").to_pylist()) == ["req_ok", "req_str"]
    assert [(r.field, r.reason) for r in parsed.rejects] == [("cache_creation_tokens", "not a token count: many")]


def test_json_multiline_body_becomes_one_line():
    body = orjson.dumps(logs_request_json([api_request_json("r", (1, 1, 1, 1))]), option=orjson.OPT_INDENT_2)
    b = otlp.decode_json(LOGS, body)
    assert b"\n" not in b.payload and orjson.loads(b.payload) == orjson.loads(body)


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'"x"',
        b'{"resourceLogs": 3}',
        b'{"resourceLogs": [1]}',
        b'{"resourceLogs": [{"scopeLogs": {}}]}',
        b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"attributes": 5}]}]}]}',
        b'{"resource_logs": []}',
        b"\xff\xfe",
        # nested past the decoder's recursion limit (a 500 with a traceback before)
        b'{"resourceLogs": [], "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_json_malformed_is_bad_payload(body):
    with pytest.raises(otlp.BadPayload):
        otlp.decode_json(LOGS, body)


def test_json_empty_request_stores_nothing():
    assert otlp.decode_json(LOGS, b"{}").records == 0
    assert otlp.decode_json(otlp.SIGNALS["metrics"], b'{"resourceMetrics":[]}').payload == b""


def test_json_metrics_count_data_points():
    body = {
        "resourceMetrics": [
            {
                "scopeMetrics": [
                    {
                        "metrics": [
                            {
                                "name": "claude_code.token.usage",
                                "sum": {
                                    "aggregationTemporality": 1,
                                    "dataPoints": [
                                        {
                                            "asDouble": 3,
                                            "timeUnixNano": "5",
                                            "attributes": [{"key": "type", "value": {"stringValue": "input"}}],
                                        },
                                        {"asDouble": 4},
                                    ],
                                },
                            },
                            {"name": "g", "gauge": {"dataPoints": [{"asInt": "1"}]}},
                        ]
                    }
                ]
            }
        ]
    }
    b = otlp.decode_json(otlp.SIGNALS["metrics"], orjson.dumps(body))
    assert b.records == 3  # the second token.usage point has no time and no type: ingest rejects it


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "resourceLogs",
                    "scopeLogs",
                    "logRecords",
                    "attributes",
                    "key",
                    "value",
                    "body",
                    "stringValue",
                    "intValue",
                    "eventName",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_json_decoder_only_ever_raises_bad_payload(value):
    try:
        b = otlp.decode_json(LOGS, orjson.dumps({"resourceLogs": value}))
    except otlp.BadPayload:
        return
    if b.records:
        orjson.loads(b.payload)


# -- protobuf --------------------------------------------------------------------------------


def test_protobuf_body_is_stored_as_received_and_ingest_judges_its_records():
    from kvtrace.ingest.otlp_json import parse_lines

    req = logs_request_pb([("req_a", (1, 2, 3, 4)), ("req_b", (1, 2, 3, 4)), ("req_c", (5, 5, 5, 5))], bad={"req_b"})
    body = req.SerializeToString()
    b = otlp.decode_protobuf(LOGS, body)
    assert (b.records, b.payload, b.frame_kind) == (3, body, LOGS.frame_kind)
    assert (
        not LOGS.pb(LOGS.response).FromString(otlp.success_body(LOGS, otlp.PROTOBUF_TYPE)).HasField("partial_success")
    )
    parsed = parse_lines(protobuf_to_json_line(LOGS, b.payload), "seg")
    assert sorted(parsed.requests.column("request_id").to_pylist()) == ["req_a", "req_c"]
    assert [(r.field, r.reason) for r in parsed.rejects] == [("input_tokens", "not a token count: lots")]


def test_protobuf_time_past_int64_is_no_time_as_ingest_reads_it():
    """fixed64 goes to 2^64 - 1; ingest reads nanoseconds as int64, so a later time is none: an
    api_request with no other time is stored by the receiver and rejected by ingest, naming it."""
    from kvtrace.ingest.otlp_json import parse_lines

    req = logs_request_pb([("req_a", (1, 2, 3, 4)), ("req_b", (1, 2, 3, 4))])
    late = req.resource_logs[0].scope_logs[0].log_records[1]
    late.time_unix_nano, late.observed_time_unix_nano = 0, 2**63 + 5
    b = otlp.decode_protobuf(LOGS, req.SerializeToString())
    assert b.records == 2
    parsed = parse_lines(protobuf_to_json_line(LOGS, b.payload), "seg")
    assert parsed.requests.column("request_id").to_pylist() == ["req_a"]
    assert [r.field for r in parsed.rejects] == ["timeUnixNano"]


def test_protobuf_garbage_is_bad_payload():
    with pytest.raises(otlp.BadPayload):
        otlp.decode_protobuf(LOGS, b"\x0a\xff\xff\xff\xff\x0f")


def _reference_json(signal, body: bytes) -> dict:
    """json_format's rendering with its base64 ids turned into hex: an independent reference."""
    from google.protobuf import json_format

    def fix(node):
        if isinstance(node, dict):
            return {
                k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else fix(v))
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return fix(json_format.MessageToDict(signal.pb(signal.request).FromString(body), use_integers_for_enums=True))


def test_protobuf_to_otlp_json_matches_reference_with_hex_ids():
    payloads = sdk_payloads()
    for name, body in payloads.items():
        sig = otlp.SIGNALS[name]
        line = protobuf_to_json_line(sig, body)
        assert b"\n" not in line
        assert orjson.loads(line) == _reference_json(sig, body), name
    spans = orjson.loads(protobuf_to_json_line(otlp.SIGNALS["traces"], payloads["traces"]))
    span = spans["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16) and len(span["spanId"]) == 16
    rec = orjson.loads(protobuf_to_json_line(LOGS, payloads["logs"]))["resourceLogs"][0]["scopeLogs"][0]["logRecords"][
        0
    ]
    assert len(rec["traceId"]) == 32 and {"key": "input_tokens", "value": {"intValue": "7"}} in rec["attributes"]


# -- segments --------------------------------------------------------------------------------


def test_frames_survive_a_damaged_middle_and_a_torn_tail():
    frames = [segments.encode_frame(otlp.JSON_FRAME, f'{{"n":{i}}}'.encode()) for i in range(5)]
    data = bytearray(b"".join(frames))
    start2 = len(frames[0]) + len(frames[1])
    data[start2 + 12] ^= 0xFF  # corrupt frame 2's payload
    data += frames[0][:7]  # a torn, unacknowledged tail
    got = [orjson.loads(p)["n"] for _, _, p in segments.iter_frames(bytes(data))]
    assert got == [0, 1, 3, 4]


def test_recover_open_cuts_the_torn_tail_and_convert_writes_otlp_json(tmp_path):
    pb = logs_request_pb([("req_x", (1, 2, 3, 4))]).SerializeToString()
    js = orjson.dumps(logs_request_json([api_request_json("req_y", (5, 6, 7, 8))]))
    good = segments.encode_frame(LOGS.frame_kind, pb) + segments.encode_frame(otlp.JSON_FRAME, js)
    p = tmp_path / "seg-1.open"
    p.write_bytes(good + segments.encode_frame(otlp.JSON_FRAME, js)[:20])
    sealed, frames, cut = segments.recover_open(p)
    assert (frames, cut, sealed.name, p.exists()) == (2, 20, "seg-1.sealed", False)
    assert sealed.read_bytes() == good
    ready, lines = segments.convert_sealed(sealed)
    assert ready.name == "seg-1.jsonl" and lines == 2 and not sealed.exists()
    rows = [orjson.loads(x) for x in ready.read_bytes().splitlines()]
    assert rows[0] == _reference_json(LOGS, pb) and rows[1] == orjson.loads(js)


def test_tidy_removes_half_done_conversions(tmp_path):
    (tmp_path / "seg-1.sealed").write_bytes(b"")
    (tmp_path / "seg-1.jsonl.tmp").write_bytes(b"partial")
    (tmp_path / "seg-2.sealed").write_bytes(b"")
    (tmp_path / "seg-2.jsonl").write_bytes(b"{}\n")
    segments.tidy(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seg-1.sealed", "seg-2.jsonl"]


def test_a_frame_that_cannot_be_converted_is_kept_aside_and_the_segment_goes_on(tmp_path, caplog):
    js = orjson.dumps(logs_request_json([api_request_json("req_z", (1, 1, 1, 1))]))
    (tmp_path / "seg-9.sealed").write_bytes(
        segments.encode_frame(otlp.JSON_FRAME, js)
        + segments.encode_frame(LOGS.frame_kind, b"\x0a\xff\xff\xff\xff\x0f")
        + segments.encode_frame(ord("?"), b"x")
    )
    ready, lines = segments.convert_sealed(tmp_path / "seg-9.sealed")
    assert lines == 1 and ready.read_bytes() == js + b"\n"
    kept = list(segments.iter_frames((tmp_path / "failed" / "seg-9.frames").read_bytes()))
    assert [k for _, k, _ in kept] == [LOGS.frame_kind, ord("?")]
    said = [r.getMessage() for r in caplog.records if "could not be converted" in r.getMessage()]
    # and it is said (once a frame; the collector's log may fold repeats of one message)
    assert said and all("seg-9.frames" in m for m in said)


def _two_ready_segments(spool: Path) -> None:
    for i in (1, 2):
        lines = [
            orjson.dumps(logs_request_json([api_request_json(f"req_w{i}_{j}", (i, 1, 1, 1)) for j in range(100)]))
            for _ in range(3)
        ]
        (spool / f"seg-{i}.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def test_a_segment_whose_ingest_fails_on_a_full_volume_is_retried_until_it_is_stored(small_tmpfs, monkeypatch):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    from kvtrace.collect import worker
    from kvtrace.store import Store
    from tests.conftest import fill

    vol = small_tmpfs("4m")
    spool, db = vol / "spool", vol / "kv.duckdb"
    spool.mkdir()
    _two_ready_segments(spool)
    Store(db).close()
    monkeypatch.setattr(worker, "BACKOFF_FIRST_S", 0.0)  # retry at once: the test needs no waiting
    filler = fill(vol)
    for _ in range(5):  # more failures than any give-up count
        r = worker.ingest_segments(str(spool), str(db), 3600)
        assert (r["segments"], r["failed"], r["retrying"]) == (0, 0, 2)
    assert sorted(p.name for p in spool.glob("seg-*")) == ["seg-1.jsonl", "seg-2.jsonl"]
    assert not (spool / "failed").exists()
    os.unlink(filler)  # space returns: stored, with no manual step
    r = worker.ingest_segments(str(spool), str(db), 3600)
    assert (r["segments"], r["requests_added"], r["failed"], r["retrying"]) == (2, 200, 0, 0)
    with Store(db, read_only=True) as store:
        assert (
            store.scalar("SELECT count(*) FROM requests")
            == store.scalar("SELECT count(DISTINCT request_id) FROM requests")
            == 200
        )


def test_many_small_segments_are_stored_once_each_in_one_transaction(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    from kvtrace.collect import worker
    from kvtrace.store import Store

    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(60):  # a quiet collector: a request a segment
        line = orjson.dumps(logs_request_json([api_request_json(f"req_s{i}", (i + 1, 1, 1, 1))]))
        (spool / f"seg-{i:04d}.jsonl").write_bytes(line + b"\n")
    db = tmp_path / "kv.duckdb"
    r = worker.ingest_segments(str(spool), str(db), 3600)
    assert (r["segments"], r["requests_added"], r["failed"], r["retrying"]) == (60, 60, 0, 0)
    assert list(spool.glob("seg-*.jsonl")) == []
    assert len(list((spool / segments.INGESTED_DIR).glob("seg-*" + segments.DONE))) == 60
    with Store(db, read_only=True) as store:
        # one ledger row per segment, all written by one transaction
        assert store.query("SELECT count(*), count(DISTINCT path), count(DISTINCT ingested_at) FROM ingested_files")[
            0
        ] == (60, 60, 1)
        assert store.scalar("SELECT count(DISTINCT request_id) FROM requests") == 60


def test_a_segment_that_failed_before_is_retried_alone_not_in_a_chunk(tmp_path, monkeypatch):
    """A segment waiting for a retry is ingested on its own, so that a second failure of it
    cannot fail the chunk of fresh segments beside it; the others still go in one transaction."""
    pytest.importorskip("kvtrace.ingest.otlp_json")
    from kvtrace.collect import worker
    from kvtrace.store import Store

    monkeypatch.setattr(worker, "BACKOFF_FIRST_S", 0.0)
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(10):
        line = orjson.dumps(logs_request_json([api_request_json(f"req_r{i}", (i + 1, 1, 1, 1))]))
        (spool / f"seg-{i:04d}.jsonl").write_bytes(line + b"\n")
    retried = spool / "seg-0003.jsonl"
    assert worker.record_failure(spool, retried, OSError(28, "No space left on device")) == "retry"
    db = tmp_path / "kv.duckdb"
    r = worker.ingest_segments(str(spool), str(db), 3600)
    assert (r["segments"], r["requests_added"], r["retrying"]) == (10, 10, 0)
    with Store(db, read_only=True) as store:
        times = dict(store.query("SELECT path, ingested_at FROM ingested_files"))
    alone = times.pop(str(retried))
    assert len(set(times.values())) == 1 and alone not in times.values()


def test_only_a_segment_ingest_cannot_read_is_set_aside_readable_by_kvtrace_ingest(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    from kvtrace.collect import worker
    from kvtrace.errors import BadTraceInput
    from kvtrace.store import Store

    spool = tmp_path / "spool"
    spool.mkdir()
    _two_ready_segments(spool)
    seg1 = spool / "seg-1.jsonl"
    assert not worker.permanent(OSError(28, "No space left on device"))
    error = BadTraceInput(str(seg1), 3, "not a token count", field="input_tokens")
    assert worker.permanent(error)
    outcomes = [worker.record_failure(spool, seg1, error) for _ in range(worker.PERMANENT_ATTEMPTS)]
    assert outcomes == ["retry"] * (worker.PERMANENT_ATTEMPTS - 1) + ["set_aside"]
    aside = spool / "failed" / "seg-1.jsonl"
    assert segments.set_aside(spool) == [aside]
    assert "seg-1.jsonl:3: field 'input_tokens'" in (spool / "failed" / "seg-1.error.txt").read_text()
    status = segments.spool_status(spool)
    assert status["ready"] == 1 and [a["path"] for a in status["set_aside"]] == [str(aside)]
    with Store(tmp_path / "kv.duckdb") as store:  # what was set aside is plain OTLP JSON lines
        from kvtrace.ingest import ingest

        assert ingest(store, [spool / "failed"]).requests_added == 100


def test_segments_an_earlier_collector_gave_up_on_are_retried_at_start(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    from kvtrace.collect.spool import Spool

    spool = tmp_path / "spool"
    (spool / "failed").mkdir(parents=True)
    _two_ready_segments(spool)
    os.replace(spool / "seg-1.jsonl", spool / "failed" / "seg-1.jsonl.failed")
    (spool / "failed" / "seg-1.jsonl.error.txt").write_text("TransactionException: Failed to commit: No space left\n")
    sealed = segments.encode_frame(
        otlp.JSON_FRAME, orjson.dumps(logs_request_json([api_request_json("req_s", (1, 1, 1, 1))]))
    )
    (spool / "failed" / "seg-0.sealed.failed").write_bytes(sealed)
    sp = Spool(spool)
    sp.open()
    sp.close()
    assert sorted(p.name for p in spool.glob("seg-*")) == ["seg-0.sealed", "seg-1.jsonl", "seg-2.jsonl"]
    assert list((spool / "failed").iterdir()) == []


def test_a_warehouse_created_on_a_full_volume_leaves_no_broken_file(small_tmpfs):
    from kvtrace.store import Store
    from tests.conftest import fill

    vol = small_tmpfs("1m")
    filler = fill(vol)
    with pytest.raises(Exception):
        Store(vol / "kv.duckdb")
    assert not (vol / "kv.duckdb").exists()  # not a half-written file refused for good
    os.unlink(filler)
    with Store(vol / "kv.duckdb") as store:
        assert store.scalar("SELECT count(*) FROM requests") == 0


# The collector's ingest judges odd token counts and times exactly as ingest does: each in its own
# record, through both encodings, stored whole by the receiver; the spool's ingest and an ingest of
# the same records as a file must store and reject the same.
ODD_COUNTS = ["١٠٠٠", "１０００", "0x10", "1_000", " 12 ", "12.5", "1e3", "+5", "-1", "nan", "1e20", "lots", "12abc"]
ODD_TIMES = [
    "20260302T091202Z",
    "2026-W10-1T09:12:02",
    "2026-03-02T09:12:02,5Z",
    "2026-03-02T09",
    "2026-03-02T09:12:02Z",
    "2026-03-02 09:12:02",
    "2026-03-02T09:12:02.250+01:00",
    "yesterday",
]


def _odd_records() -> list[tuple[str, dict]]:
    """(request id, OTLP JSON api_request) pairs: one odd value each."""
    out = []
    for i, text in enumerate(ODD_COUNTS):
        rec = api_request_json(f"req_count_{i}", (1, 1, 1, 1))
        next(a for a in rec["attributes"] if a["key"] == "input_tokens")["value"] = {"stringValue": text}
        out.append((f"req_count_{i}", rec))
    for i, text in enumerate(ODD_TIMES):
        rec = api_request_json(f"req_time_{i}", (1, 1, 1, 1))
        del rec["timeUnixNano"]
        rec["attributes"].append({"key": "event.timestamp", "value": {"stringValue": text}})
        out.append((f"req_time_{i}", rec))
    rec = api_request_json("req_ns_arabic", (1, 1, 1, 1))
    rec["timeUnixNano"] = "١٧٩١٤٤٧٣١٨١٣٧٠٠٠٠٠٠"
    out.append(("req_ns_arabic", rec))
    return out


def _as_protobuf(records: list[dict]) -> bytes:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return ParseDict(logs_request_json(records), ExportLogsServiceRequest()).SerializeToString()


@pytest.mark.parametrize("media", [otlp.JSON_TYPE, otlp.PROTOBUF_TYPE])
def test_the_collectors_ingest_stores_and_rejects_what_ingest_does(tmp_path, media):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    from kvtrace.ingest import ingest
    from kvtrace.store import Store

    pairs = _odd_records()
    if media == otlp.PROTOBUF_TYPE:  # a protobuf time is a number: only the attributes can be odd
        pairs = [(rid, rec) for rid, rec in pairs if rid != "req_ns_arabic"]
    for rid, rec in pairs:  # one record per request, stored whole
        body = orjson.dumps(logs_request_json([rec])) if media == otlp.JSON_TYPE else _as_protobuf([rec])
        assert receive(tmp_path / "spool", "logs", media, body, name=rid) == 1
    direct = tmp_path / "direct.jsonl"
    direct.write_bytes(b"".join(orjson.dumps(logs_request_json([rec])) + b"\n" for _, rec in pairs))
    with Store(tmp_path / "kv.duckdb") as store:
        summary = ingest(store, [tmp_path / "spool"], format="otlp-json")
        stored = {r[0] for r in store.query("SELECT request_id FROM requests")}
    with Store(memory=True) as store:
        reference = ingest(store, [direct], format="otlp-json")
        expected = {r[0] for r in store.query("SELECT request_id FROM requests")}
    assert stored == expected
    assert summary.lines_rejected == reference.lines_rejected == len(pairs) - len(stored)
    assert reasons(summary.rejects) == reasons(reference.rejects)
    # the odd forms Python reads but ingest does not are among the rejected ones
    refused = {rid for rid, _ in pairs} - stored
    assert {"req_count_0", "req_count_1", "req_time_0", "req_time_1", "req_time_2", "req_time_3"} <= refused
    assert {"req_count_2", "req_count_3", "req_count_4", "req_time_4", "req_time_5"} <= stored


def test_rejects_of_a_chunk_that_failed_are_counted_once(tmp_path, monkeypatch):
    """A chunk whose transaction failed is read again segment by segment: its rejected records
    count once (they were counted before the rollback too)."""
    from kvtrace.collect import worker
    from kvtrace.ingest import pipeline
    from tests.collect_support import receive
    from tests.otlp_records import event, logs_line

    for i in range(2):
        line = logs_line(event(request_id=f"ok{i}"), event(request_id=f"bad{i}", input_tokens="many"))
        receive(tmp_path / "spool", "logs", otlp.JSON_TYPE, line.encode(), name=str(i))
    merge, calls = pipeline._merge, []

    def full_once(*a, **k):  # the disk is full for the chunk's transaction only
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return merge(*a, **k)

    monkeypatch.setattr(pipeline, "_merge", full_once)
    got = worker.ingest_segments(str(tmp_path / "spool"), str(tmp_path / "kv.duckdb"), 3600, now=True)
    assert (got["segments"], got["requests_added"], got["lines_rejected"]) == (2, 2, 2)
