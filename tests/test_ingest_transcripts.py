"""Claude Code transcripts: one row per API response, de-duplicated as docs/formats.md §3 says."""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace.ingest import ingest
from kvtrace.ingest.base import REQUEST_SCHEMA
from kvtrace.ingest.claude_transcripts import parse

from tests.transcript_records import (
    PROJECT,
    SESSION,
    agent_file,
    assistant,
    main_file,
    progress_with_agent_message,
    user,
    write,
)


def rows(parsed) -> dict[str, dict]:
    return {r["message_id"]: r for r in parsed.requests.to_pylist()}


def stored(store) -> list[dict]:
    return store.to_arrow("SELECT * FROM requests ORDER BY message_id").to_pylist()


# -- one row per response ------------------------------------------------------------------------


def test_a_response_written_as_several_lines_counts_once_with_its_largest_output(tmp_path):
    f = write(
        main_file(tmp_path),
        [
            user(),
            assistant(out=3, block="thinking", ts="2026-08-01T04:50:41.000Z"),
            assistant(out=388, block="text", ts="2026-08-01T04:50:42.000Z"),
            assistant(out=12, block="tool_use", ts="2026-08-01T04:50:43.000Z"),  # a later line may read less
            user(tool_result_bytes=5000),
        ],
    )
    p = parse([f])
    assert p.requests.num_rows == 1 and not p.rejects
    r = p.requests.to_pylist()[0]
    assert r["output_tokens"] == 388
    assert (r["input_tokens"], r["cache_read_tokens"]) == (2, 9982)
    assert r["ts"] == datetime(2026, 8, 1, 4, 50, 41)  # the response's first line
    assert r["request_key"] == "req_1" and r["request_id"] == "req_1" and r["message_id"] == "msg_1"
    assert (r["source"], r["agent"], r["query_source"], r["thread_id"]) == (
        "claude-transcript",
        "claude-code",
        "main",
        "main",
    )
    assert r["session_id"] == SESSION and r["project"] == PROJECT and r["model"] == "claude-opus-4-8"
    assert r["ingested_from"] == f"{f}:3"
    assert json.loads(r["attributes"])["version"] == "2.1.220"
    assert p.requests.schema == REQUEST_SCHEMA


def test_progress_lines_embedding_a_subagent_message_do_not_count(tmp_path):
    inner = assistant(msg="msg_sub", req="req_sub", out=50, sidechain=True, agent="a1")
    f = write(main_file(tmp_path), [assistant(), progress_with_agent_message(inner)])
    assert set(rows(parse([f]))) == {"msg_1"}


def test_request_key_falls_back_to_message_id(tmp_path):
    f = write(main_file(tmp_path), [assistant(req=None)])
    r = parse([f]).requests.to_pylist()[0]
    assert r["request_key"] == "msg_1" and r["request_id"] is None


def test_cache_write_split_is_preferred_even_when_the_total_reads_zero(tmp_path):
    f = write(
        main_file(tmp_path),
        [
            assistant(msg="m_split", req="r1", w5=100, w1=40, total=0),  # pre-2.1.152 quirk
            assistant(msg="m_nosplit", req="r2", w5=70, split=False),  # older builds: total only
        ],
    )
    got = rows(parse([f]))
    s, n = got["m_split"], got["m_nosplit"]
    assert (s["cache_write_5m_tokens"], s["cache_write_1h_tokens"], s["cache_write_unknown_tokens"]) == (100, 40, 0)
    assert (n["cache_write_5m_tokens"], n["cache_write_1h_tokens"], n["cache_write_unknown_tokens"]) == (0, 0, 70)


def test_timestamps_are_utc(tmp_path):
    f = write(main_file(tmp_path), [assistant(ts="2026-08-01T06:50:42.500+02:00")])
    assert parse([f]).requests.to_pylist()[0]["ts"] == datetime(2026, 8, 1, 4, 50, 42, 500000)


# -- replays -------------------------------------------------------------------------------------


def test_sidechain_replay_counts_once_and_the_main_copy_wins_in_one_batch(tmp_path):
    m = write(main_file(tmp_path), [assistant(out=400)])
    a = write(
        agent_file(tmp_path),
        [
            assistant(req="req_replayed", out=400, sidechain=True, agent="a08bf6deeb6ef7e1f"),
            assistant(msg="msg_sub", req="req_sub", out=77, sidechain=True, agent="a08bf6deeb6ef7e1f"),
        ],
    )
    for order in ([m, a], [a, m]):
        got = rows(parse(order))
        assert set(got) == {"msg_1", "msg_sub"}
        assert got["msg_1"]["is_sidechain"] is False and got["msg_1"]["request_key"] == "req_1"
        assert got["msg_1"]["thread_id"] == "main"
        sub = got["msg_sub"]
        assert (sub["is_sidechain"], sub["thread_id"], sub["query_source"]) == (True, "a08bf6deeb6ef7e1f", "subagent")


@pytest.mark.parametrize("subagent_first", [True, False])
def test_sidechain_replay_counts_once_whatever_the_ingest_order(store, tmp_path, subagent_first):
    m = write(main_file(tmp_path), [assistant(out=400)])
    a = write(
        agent_file(tmp_path),
        [
            assistant(req="req_replayed", out=400, sidechain=True, agent="a1"),
            assistant(msg="msg_sub", req="req_sub", out=77, sidechain=True, agent="a1"),
        ],
    )
    first, second = (a, m) if subagent_first else (m, a)
    ingest(store, [first])
    s2 = ingest(store, [second])
    got = {r["message_id"]: r for r in stored(store)}
    assert set(got) == {"msg_1", "msg_sub"}
    assert got["msg_1"]["is_sidechain"] is False and got["msg_1"]["request_key"] == "req_1"
    assert got["msg_1"]["output_tokens"] == 400
    assert s2.duplicates_skipped == 1  # the replay, or the stored replay the main copy replaced


def test_a_subagent_file_without_flags_is_still_a_sidechain(tmp_path):
    rec = assistant(msg="msg_sub", req="req_sub")
    del rec["isSidechain"]
    got = rows(parse([write(agent_file(tmp_path, "abc"), [rec])]))["msg_sub"]
    assert (got["is_sidechain"], got["thread_id"], got["query_source"]) == (True, "abc", "subagent")


def test_resumed_session_copies_count_once(store, tmp_path):
    history = [assistant(msg="m1", req="r1", out=10), assistant(msg="m2", req="r2", out=20)]
    old = write(main_file(tmp_path, "old-session"), history)
    new = write(main_file(tmp_path, "new-session"), history + [assistant(msg="m3", req="r3", out=30)])
    p = parse([old, new])
    assert sorted(rows(p)) == ["m1", "m2", "m3"]
    assert sum(r["output_tokens"] for r in p.requests.to_pylist()) == 60
    ingest(store, [old])
    s = ingest(store, [new])
    assert (s.requests_added, s.duplicates_skipped) == (1, 2)
    assert store.scalar("SELECT sum(output_tokens) FROM requests") == 60


def test_reingest_adds_nothing(store, tmp_path):
    write(
        main_file(tmp_path),
        [assistant(msg="m1", req="r1"), assistant(msg="m1", req="r1", out=500), assistant(msg="m2", req="r2")],
    )
    write(
        agent_file(tmp_path),
        [
            assistant(msg="m3", req="r3", sidechain=True, agent="a1"),
            assistant(msg="m1", req="r9", sidechain=True, agent="a1"),
        ],
    )
    s1 = ingest(store, [tmp_path / "projects"])
    before = stored(store)
    assert s1.requests_added == 3
    s2 = ingest(store, [tmp_path / "projects"])
    s3 = ingest(store, [tmp_path / "projects"], force=True)
    assert s2.requests_added == s3.requests_added == 0 and s2.files_skipped == 2
    assert stored(store) == before


# -- robustness ----------------------------------------------------------------------------------


def test_whitespace_does_not_matter(tmp_path):
    recs = [
        user(),
        assistant(msg="m1", req="r1", out=5),
        assistant(msg="m1", req="r1", out=90),
        assistant(msg="m2", req="r2", w5=300, w1=12, sidechain=False),
    ]
    compact = parse([write(tmp_path / "a" / "projects" / PROJECT / "s.jsonl", recs)])
    spaced = parse([write(tmp_path / "b" / "projects" / PROJECT / "s.jsonl", recs, sep=(", ", ": "))])
    pretty_ish = parse(
        [
            write(
                tmp_path / "c" / "projects" / PROJECT / "s.jsonl",
                [json.dumps(r, indent=None, separators=(" ,  ", " :\t")) for r in recs],
            )
        ]
    )

    def rows_without_path(p):
        return sorted(p.requests.drop(["ingested_from"]).to_pylist(), key=lambda r: r["request_key"])

    want = rows_without_path(compact)
    assert len(want) == 2
    assert rows_without_path(spaced) == want
    assert rows_without_path(pretty_ish) == want


def test_torn_last_line_is_skipped_but_a_bad_line_elsewhere_is_rejected(tmp_path):
    good = json.dumps(assistant(msg="m2", req="r2"), separators=(",", ":"))
    torn = good[: good.index('"usage"')]  # cut after "role":"assistant", so it is a candidate line
    assert '"assistant"' in torn
    f = write(main_file(tmp_path), [assistant(), torn, user()], tail=torn)  # no final newline
    p = parse([f])
    assert set(rows(p)) == {"msg_1"}
    assert p.unknown["torn_last_line"] == 1
    assert [(r.path, r.line) for r in p.rejects] == [(str(f), 2)]
    assert p.rejects[0].describe().startswith(f"{f}:2: malformed JSON")
    assert p.lines == 4


def test_a_complete_last_line_without_newline_counts(tmp_path):
    f = write(main_file(tmp_path), [], tail=json.dumps(assistant()))
    p = parse([f])
    assert set(rows(p)) == {"msg_1"} and not p.rejects and not p.unknown


def test_synthetic_and_api_error_records_are_skipped_and_counted(tmp_path):
    err = assistant(msg="e1", req=None, model="<synthetic>", out=0)
    err["isApiErrorMessage"] = True
    syn = assistant(msg="s1", req=None, model="<synthetic>", out=0)
    no_usage = assistant(msg="n1", req="rn")
    del no_usage["message"]["usage"]
    compact = {
        "type": "system",
        "subtype": "compact_boundary",
        "sessionId": SESSION,
        "uuid": "c1",
        "timestamp": "2026-08-01T05:00:00Z",
        "compactMetadata": {"trigger": "auto", "preTokens": 155000},
    }
    p = parse([write(main_file(tmp_path), [err, syn, no_usage, compact, assistant()])])
    assert set(rows(p)) == {"msg_1"} and not p.rejects
    assert (
        p.unknown["api_error"],
        p.unknown["synthetic"],
        p.unknown["assistant_without_usage"],
        p.unknown["compact_boundary"],
    ) == (1, 1, 1, 1)


def test_bad_values_are_rejected_with_their_field(tmp_path):
    neg = assistant(msg="m_neg", req="r_neg", inp=-4)
    no_ts = assistant(msg="m_ts", req="r_ts")
    no_ts["timestamp"] = "yesterday"
    f = write(main_file(tmp_path), [neg, no_ts, assistant()])
    p = parse([f])
    assert set(rows(p)) == {"msg_1"}
    assert sorted((r.line, r.field) for r in p.rejects) == [(1, "message.usage.input_tokens"), (2, "timestamp")]


# Present but not a whole number from 0 to 2^63-1: each was once stored as 0.
_NOT_COUNTS = ["1e20", '"lots"', "NaN", "1e400", "[1]", '{"n": 1}', "null", "-1", "Infinity"]


@pytest.mark.parametrize("value", _NOT_COUNTS)
@pytest.mark.parametrize(
    "field", ["output_tokens", "cache_read_input_tokens", "cache_creation.ephemeral_1h_input_tokens"]
)
def test_a_count_that_is_not_a_count_is_rejected_naming_file_line_and_field(tmp_path, value, field):
    bad = assistant(msg="m_bad", req="r_bad")
    *parents, key = field.split(".")
    holder = bad["message"]["usage"]
    for name in parents:
        holder = holder[name]
    holder[key] = "@BAD@"  # then written as the raw JSON text ``value``
    written = json.dumps(bad, separators=(",", ":")).replace('"@BAD@"', value)
    f = write(main_file(tmp_path), [user(), written, assistant()])
    p = parse([f])
    assert set(rows(p)) == {"msg_1"}
    assert [(r.path, r.line, r.field) for r in p.rejects] == [(str(f), 2, f"message.usage.{field}")]
    assert "not a token count" in p.rejects[0].reason


def test_counts_written_as_numeric_text_or_whole_floats_are_read(tmp_path):
    rec = json.dumps(assistant(msg="m", req="r", out=5, inp=3), separators=(",", ":"))
    rec = rec.replace('"output_tokens":5', '"output_tokens":"7"').replace('"input_tokens":3', '"input_tokens":3.0')
    p = parse([write(main_file(tmp_path), [rec])])
    assert not p.rejects
    assert (rows(p)["m"]["output_tokens"], rows(p)["m"]["input_tokens"]) == (7, 3)


def test_a_bad_count_is_fatal_under_strict_with_file_line_field(store, tmp_path):
    rec = json.dumps(assistant(), separators=(",", ":")).replace('"output_tokens":412', '"output_tokens":"lots"')
    f = write(main_file(tmp_path), [user(), rec])
    with pytest.raises(Exception) as e:
        ingest(store, [f], strict=True)
    assert f"{f}:2" in str(e.value) and "message.usage.output_tokens" in str(e.value)
    assert store.scalar("SELECT count(*) FROM requests") == 0


def _plain(tmp_path) -> Path:
    recs = [user(), assistant(msg="m1", req="r1", out=7), assistant(msg="m1", req="r1", out=70)]
    return write(main_file(tmp_path, "plain"), recs)


def test_gzip_files_read_like_plain_ones(tmp_path):
    gz = tmp_path / "projects" / PROJECT / "zipped.jsonl.gz"
    gz.parent.mkdir(parents=True)
    gz.write_bytes(gzip.compress(b"\n" + json.dumps(assistant(msg="m2", req="r2")).encode() + b"\n"))
    got = rows(parse([_plain(tmp_path), gz]))
    assert set(got) == {"m1", "m2"} and got["m1"]["output_tokens"] == 70
    assert got["m2"]["ingested_from"] == f"{gz}:2" and got["m2"]["project"] == PROJECT


def test_a_file_with_bytes_that_are_not_utf8_is_still_read(tmp_path):
    latin = main_file(tmp_path, "latin")
    latin.parent.mkdir(parents=True)
    latin.write_bytes(
        b'{"type":"user","message":{"content":"caf\xe9"}}\n'
        + json.dumps(assistant(msg="m3", req="r3")).encode()
        + b"\n"
    )
    got = rows(parse([_plain(tmp_path), latin]))
    assert set(got) == {"m1", "m3"} and got["m1"]["output_tokens"] == 70
    assert got["m3"]["ingested_from"] == f"{latin}:2"


@pytest.mark.parametrize("parallel", [False, True])
def test_only_the_files_duckdb_cannot_read_are_read_in_python(tmp_path, monkeypatch, parallel):
    import kvtrace.ingest.claude_transcripts as ct

    monkeypatch.setattr(ct, "_PARALLEL_BYTES", 0 if parallel else 1 << 60)
    others = [write(main_file(tmp_path, f"s{k}"), [assistant(msg=f"m{k}", req=f"r{k}", out=k + 1)]) for k in range(4)]
    # a session being written: its last line is torn inside a character ("\u2014", 3 bytes)
    torn = main_file(tmp_path, "torn")
    torn.write_bytes(json.dumps(assistant(msg="m9", req="r9")).encode() + b'\n{"type":"user","message":"a \xe2\x80')
    gz = tmp_path / "projects" / PROJECT / "zipped.jsonl.gz"
    gz.write_bytes(gzip.compress(json.dumps(assistant(msg="m8", req="r8")).encode() + b"\n"))
    read_in_python = []
    read_whole = ct.read_whole
    monkeypatch.setattr(ct, "read_whole", lambda p: read_in_python.append(p) or read_whole(p))
    got = parse([*others, torn, gz])
    assert set(rows(got)) == {"m0", "m1", "m2", "m3", "m8", "m9"} and not got.rejects
    assert sorted(read_in_python) == sorted([torn, gz])
    assert rows(got)["m3"]["output_tokens"] == 4 and rows(got)["m9"]["ingested_from"] == f"{torn}:1"


def test_a_vanished_file_is_reported_and_the_rest_is_read(tmp_path):
    ok = write(main_file(tmp_path), [assistant()])
    p = parse([ok, tmp_path / "projects" / PROJECT / "gone.jsonl"])
    assert set(rows(p)) == {"msg_1"}
    assert len(p.rejects) == 1 and p.rejects[0].line is None and "gone.jsonl" in p.rejects[0].path


def test_no_files_no_rows():
    p = parse([])
    assert p.requests.num_rows == 0 and p.requests.schema == REQUEST_SCHEMA


def test_many_files_in_parallel_groups_match_one_group(tmp_path, monkeypatch):
    import kvtrace.ingest.claude_transcripts as ct

    files = []
    for s in range(12):
        recs = [assistant(msg=f"m{s}-{i}", req=f"r{s}-{i}", out=i + s) for i in range(5)]
        recs.append(assistant(msg="m0-0", req=f"replay{s}", out=0, sidechain=True, agent=f"a{s}"))
        files.append(write(main_file(tmp_path, f"s{s}") if s % 3 else agent_file(tmp_path, f"a{s}"), recs))
    monkeypatch.setattr(ct, "_PARALLEL_BYTES", 0)
    many = parse(files)
    monkeypatch.setattr(ct, "_PARALLEL_BYTES", 1 << 60)
    one = parse(files)
    assert many.requests.num_rows == one.requests.num_rows == 60
    key = lambda r: r["request_key"]  # noqa: E731
    assert sorted(many.requests.to_pylist(), key=key) == sorted(one.requests.to_pylist(), key=key)
    assert many.lines == one.lines == 72


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["assistant", "user", "<synthetic>", "compact_boundary", "2026-08-01T04:50:42Z"]),
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "message",
                    "usage",
                    "id",
                    "requestId",
                    "timestamp",
                    "isSidechain",
                    "input_tokens",
                    "output_tokens",
                    "cache_creation",
                    "ephemeral_5m_input_tokens",
                    "model",
                    "subtype",
                    "x",
                ]
            )
            | st.text(max_size=5),
            kids,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(json_values, min_size=1, max_size=6), torn=st.booleans())
def test_arbitrary_json_lines_never_crash(tmp_path_factory, records, torn):
    d = tmp_path_factory.mktemp("fuzz") / "projects" / PROJECT
    lines = [json.dumps(r) for r in records] + [json.dumps(assistant())]
    if torn:
        lines.append(lines[0][:-1])
    f = d / "s.jsonl"
    d.mkdir(parents=True)
    f.write_text("\n".join(lines))
    p = parse([f])
    assert isinstance(p.requests, pa.Table) and p.requests.schema == REQUEST_SCHEMA
    assert "msg_1" in {r["message_id"] for r in p.requests.to_pylist()}
    assert all(r.path == str(f) for r in p.rejects)
