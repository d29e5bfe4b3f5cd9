"""OTLP JSON lines: Claude Code events, token.usage metrics and llm_request spans → warehouse rows."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace.ingest import ingest
from kvtrace.ingest import otlp_common, otlp_json
from kvtrace.ingest.otlp_json import parse, parse_lines

from tests.agent_exports import CODEX, lines as fixture_lines
from tests.otlp_records import T0, event, kvs, lines, logs_line, metrics_line, point, span, spans_line

T0_DT = dt.datetime(2026, 11, 29, 11, 51, 55, 943000)


def rows(parsed) -> list[dict]:
    return parsed.requests.to_pylist() if parsed.requests is not None else []


def usage(store, session="s1") -> dict:
    r = store.query(
        """SELECT sum(input_tokens), sum(cache_read_tokens), sum(cache_write_unknown_tokens),
                              sum(output_tokens), count(*)
                       FROM request_usage WHERE session_id = ?""",
        [session],
    )[0]
    return dict(zip(("input", "read", "write", "output", "rows"), r))


# -- api_request events --------------------------------------------------------------------------


def test_api_request_becomes_one_exact_row():
    p = parse_lines(lines(logs_line(event())), "spool-7")
    assert p.lines == 1 and not p.rejects and not p.unknown
    [r] = rows(p)
    assert r["request_key"] == r["request_id"] == "req_1"
    assert r["ts"] == T0_DT and r["source"] == "otlp-log" and r["agent"] == "claude-code"
    assert (r["session_id"], r["user_id"], r["model"], r["thread_id"]) == ("s1", "u-hash", "claude-opus-4-8", "main")
    assert r["query_source"] == "main"  # 'sdk' (headless main thread), normalized
    assert (r["input_tokens"], r["output_tokens"], r["cache_read_tokens"]) == (113, 127, 21000)
    assert (r["cache_write_unknown_tokens"], r["cache_write_5m_tokens"], r["cache_write_1h_tokens"]) == (417, 0, 0)
    assert r["cost_usd"] == pytest.approx(0.01684625) and r["duration_ms"] == 36 and r["ttft_ms"] is None
    assert r["ingested_from"] == "spool-7:1"
    attrs = json.loads(r["attributes"])
    assert attrs["query_source"] == "sdk" and attrs["prompt.id"] == "p1" and attrs["service.name"] == "claude-code"
    assert "input_tokens" not in attrs and "session.id" not in attrs


@pytest.mark.parametrize("wire", ["js", "collector", "string", "double"])
def test_counts_are_read_by_name_whatever_the_wire_type(wire):
    [r] = rows(parse_lines(lines(logs_line(event(wire=wire))), "x"))
    assert (r["input_tokens"], r["output_tokens"], r["cache_read_tokens"], r["cache_write_unknown_tokens"]) == (
        113,
        127,
        21000,
        417,
    )
    assert r["cost_usd"] == pytest.approx(0.01684625) and r["duration_ms"] == 36


def test_an_empty_double_value_is_dropped_not_rejected():
    p = parse_lines(lines(logs_line(event(cost_usd={"doubleValue": {}}, ttft_ms={"doubleValue": {}}))), "x")
    [r] = rows(p)
    assert not p.rejects and r["cost_usd"] is None and r["ttft_ms"] is None and r["output_tokens"] == 127


def test_newer_clients_give_the_ttl_split_of_the_cache_write():
    rec = event(cache_creation_5m_tokens=400, cache_creation_1h_tokens=17)
    [r] = rows(parse_lines(lines(logs_line(rec)), "x"))
    assert (r["cache_write_5m_tokens"], r["cache_write_1h_tokens"], r["cache_write_unknown_tokens"]) == (400, 17, 0)


def test_time_falls_back_to_observed_time_then_event_timestamp():
    a = event(time_ns=None, observed_ns=T0 + 5_000_000, request_id="a")
    b = event(time_ns=None, request_id="b", **{"event.timestamp": "2026-11-29T11:51:56.500Z"})
    c = event(time_ns="0", request_id="c", **{"event.timestamp": None})  # 0 = unset in proto3
    p = parse_lines(lines(logs_line(a, b, c)), "x")
    ts = {r["request_id"]: r["ts"] for r in rows(p)}
    assert ts == {"a": T0_DT + dt.timedelta(milliseconds=5), "b": dt.datetime(2026, 11, 29, 11, 51, 56, 500000)}
    assert [(x.line, x.field) for x in p.rejects] == [(1, "timeUnixNano")]


def test_without_request_id_the_key_is_a_content_hash_stable_across_wire_encodings():
    k = [
        rows(parse_lines(lines(logs_line(event(wire=w, request_id=None))), "x"))[0]["request_key"]
        for w in ("js", "collector", "string")
    ]
    other = rows(parse_lines(lines(logs_line(event(request_id=None, output_tokens=128))), "x"))[0]["request_key"]
    assert k[0] == k[1] == k[2] and other != k[0] and k[0].startswith("otlp:")


def test_subagent_requests_get_the_agent_name_as_thread():
    rec = event(query_source="agent:builtin:general-purpose", **{"agent.name": "general-purpose"})
    [r] = rows(parse_lines(lines(logs_line(rec)), "x"))
    assert (r["query_source"], r["thread_id"]) == ("subagent", "general-purpose")
    [c] = rows(parse_lines(lines(logs_line(event(query_source="compact"))), "x"))
    assert (c["query_source"], c["thread_id"]) == ("auxiliary", "main")


def test_other_events_and_foreign_logs_are_counted_by_kind():
    foreign = {
        "timeUnixNano": str(T0),
        "body": {"stringValue": "GET /health 200"},
        "eventName": "http.access",
        "attributes": kvs({"http.status": 200}),
    }
    p = parse_lines(
        lines(
            logs_line(
                event("user_prompt"),
                event("compaction", pre_tokens="1567"),
                event(),
                event("api_error", status_code=529),
            ),
            json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [foreign]}]}]}),
        ),
        "x",
    )
    assert len(rows(p)) == 1
    assert dict(p.unknown) == {
        "event:user_prompt": 1,
        "event:compaction": 1,
        "event:api_error": 1,
        "log:http.access": 1,
    }


def test_event_name_attribute_alone_identifies_an_api_request():
    rec = event()
    del rec["body"]
    assert len(rows(parse_lines(lines(logs_line(rec)), "x"))) == 1


# -- malformed input -----------------------------------------------------------------------------


def test_bad_lines_and_bad_counts_are_rejected_with_line_and_field(tmp_path):
    f = tmp_path / "otel.jsonl"
    f.write_text(
        "\n".join(
            [
                logs_line(event(request_id="ok1")),
                "{not json",
                "[1, 2]",
                json.dumps({"resourceLogs": {"oops": 1}}),
                json.dumps({"resource_logs": []}),
                json.dumps({"hello": "world"}),
                logs_line(event(request_id="bad", input_tokens="12x")),
                "",
                logs_line(event(request_id="neg", output_tokens=-3), event(request_id="ok2")),
                metrics_line(point("input", "lots", T0, T0 + 1)),
                metrics_line(point(None, 5.0, T0, T0 + 1)),
                '{"resourceLogs": [',  # torn: no newline at the end
            ]
        )
    )
    p = parse(f)
    assert sorted(r["request_id"] for r in rows(p)) == ["ok1", "ok2"]
    got = [(r.line, r.field) for r in p.rejects]
    assert got == [
        (2, None),
        (3, None),
        (4, "resourceLogs"),
        (5, "resource_logs"),
        (6, None),
        (7, "input_tokens"),
        (9, "output_tokens"),
        (10, "asDouble"),
        (11, "type"),
        (12, None),
    ]
    reasons = {r.line: r.reason for r in p.rejects}
    assert "12x" in reasons[7] and "torn" in reasons[12] and "invalid JSON" in reasons[2]
    assert p.lines == 12


def test_pipeline_reports_bad_lines_as_file_line_field(store, tmp_path):
    f = tmp_path / "otel.jsonl"
    f.write_text(
        logs_line(event(request_id="ok")) + "\n" + logs_line(event(request_id="b", cache_read_tokens="n/a")) + "\n"
    )
    s = ingest(store, [f])
    assert s.requests_added == 1 and s.lines_rejected == 1
    assert s.rejects == [f"{f}:2: field 'cache_read_tokens': not a token count: n/a"]


def test_a_line_that_is_not_utf8_is_rejected_and_the_rest_read():
    data = (
        lines(logs_line(event(request_id="a")))
        + b'{"resourceLogs": "\xff\xfe"}\n'
        + lines(logs_line(event(request_id="b")))
    )
    p = parse_lines(data, "x")
    assert [r["request_id"] for r in rows(p)] == ["a", "b"] and [r.line for r in p.rejects] == [2]


# -- inputs ----------------------------------------------------------------------------------------


def test_gzip_and_plain_files_give_the_same_rows(tmp_path):
    text = "\n".join(logs_line(event(request_id=f"r{i}", output_tokens=i)) for i in range(5)) + "\n"
    (tmp_path / "a.jsonl").write_text(text)
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as fh:
        fh.write(text)
    a, b = parse(tmp_path / "a.jsonl"), parse(tmp_path / "a.jsonl.gz")

    def strip(p):
        return sorted(
            (r | {"ingested_from": r["ingested_from"].rsplit(":", 1)[1]} for r in rows(p)),
            key=lambda r: r["request_key"],
        )

    assert strip(a) == strip(b) and len(strip(a)) == 5


def test_a_truncated_gzip_keeps_what_it_had_and_says_so(tmp_path):
    text = "\n".join(logs_line(event(request_id=f"r{i}")) for i in range(200)) + "\n"
    blob = gzip.compress(text.encode())
    (tmp_path / "t.jsonl.gz").write_bytes(blob[: len(blob) // 2])
    p = parse(tmp_path / "t.jsonl.gz")
    assert any("gzip" in r.reason for r in p.rejects)


def test_parse_lines_accepts_an_iterable_of_lines():
    a = parse_lines([logs_line(event(request_id="a")), logs_line(event(request_id="b")).encode() + b"\n"], "seg")
    assert [r["ingested_from"] for r in rows(a)] == ["seg:1", "seg:2"]


def test_line_numbers_stay_right_across_chunks_and_batches(monkeypatch):
    data = lines(*(logs_line(event(request_id=f"r{i}"), event(request_id=f"q{i}")) for i in range(60)))
    whole = {r["request_key"]: r["ingested_from"] for r in rows(parse_lines(data, "x"))}
    monkeypatch.setattr(otlp_common, "BATCH_BYTES", 3000)
    chunks = list(otlp_common.iter_chunks(io.BytesIO(data), 5000))
    assert len(chunks) > 5 and b"".join(chunks) == data
    split = {r["request_key"]: r["ingested_from"] for r in rows(otlp_json._parse(iter((c, None) for c in chunks), "x"))}
    assert split == whole and whole["r41"] == "x:42" and whole["q0"] == "x:1"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    st.booleans(),
    st.integers(1, 64),
)
def test_pieces_are_whole_lines_and_lose_nothing(lines_, final_newline, size):
    data = b"\n".join(lines_) + (b"\n" if final_newline and lines_ else b"")
    pieces = list(otlp_common.iter_chunks(io.BytesIO(data), size))
    assert b"".join(pieces) == data
    assert all(p.endswith(b"\n") for p in pieces[:-1]) and all(pieces)
    # two buffers in turn: a piece stays intact while the next one is read (prefetch's case)
    held, prev = [], None
    for p in otlp_common.iter_chunks(io.BytesIO(data), size, buffers=2):
        if prev is not None:
            held.append(bytes(prev))  # read after the next piece was filled
        prev = p
    if prev is not None:
        held.append(bytes(prev))
    assert held == [bytes(p) for p in pieces]


def test_prefetch_yields_everything_in_order_and_passes_errors_on():
    assert list(otlp_common.prefetch(iter(range(5)))) == [0, 1, 2, 3, 4]

    def boom():
        yield 1
        raise ValueError("disk")

    with pytest.raises(ValueError, match="disk"):
        list(otlp_common.prefetch(boom()))


def test_empty_and_blank_inputs():
    assert parse_lines(b"", "x").lines == 0
    p = parse_lines(b"\n  \n\r\n", "x")
    assert not p.rejects and not rows(p)


# -- metrics ---------------------------------------------------------------------------------------


def test_token_usage_points_with_temporality_read_per_metric():
    s = 1_795_953_000_000_000_000
    p = parse_lines(
        lines(
            metrics_line(
                point("input", 10.0, s, s + 10**9), point("cacheRead", "900", s, s + 10**9, value_key="asInt")
            ),
            metrics_line(point("output", 5, s, s + 10**9), temporality=2),
            metrics_line(point("output", 7, s, s + 2 * 10**9), temporality=None),
            metrics_line(point("output", 1.0, s, s + 10**9), name="claude_code.cost.usage"),
        ),
        "m",
    )
    pts = sorted(p.metric_points.to_pylist(), key=lambda r: r["ingested_from"])
    assert [(x["token_type"], x["value"], x["temporality"]) for x in pts] == [
        ("input", 10.0, 1),
        ("cacheRead", 900.0, 1),
        ("output", 5.0, 2),
        ("output", 7.0, 1),
    ]
    assert all(x["source"] == "otlp-metric" and x["session_id"] == "s1" and x["query_source"] == "main" for x in pts)
    assert pts[2]["series_key"] == pts[3]["series_key"]  # same resource and attributes
    assert len({x["point_key"] for x in pts}) == 4
    assert dict(p.unknown) == {"metric:claude_code.cost.usage": 1}


def test_a_point_exported_twice_is_kept_once():
    s = 1_795_953_000_000_000_000
    line = metrics_line(point("input", 10.0, s, s + 10**9))
    assert parse_lines(lines(line, line), "m").metric_points.num_rows == 1


def test_delta_points_are_summed(store, tmp_path):
    s = 1_795_953_000_000_000_000
    f = tmp_path / "m.jsonl"
    f.write_text(
        metrics_line(point("input", 10.0, s, s + 60 * 10**9), point("output", 3.0, s, s + 60 * 10**9))
        + "\n"
        + metrics_line(point("input", 5.0, s + 60 * 10**9, s + 120 * 10**9))
        + "\n"
    )
    ingest(store, [f])
    assert usage(store) | {"rows": 0} == {"input": 15, "read": 0, "write": 0, "output": 3, "rows": 0}


def test_cumulative_points_are_differenced_with_resets(store, tmp_path):
    s, m = 1_795_953_000_000_000_000, 60 * 10**9
    f = tmp_path / "m.jsonl"
    # running totals 100, 250, 250 (unchanged), then the process restarts: 40, 90
    f.write_text(
        "\n".join(
            [
                metrics_line(point("cacheRead", 100.0, s, s + m), temporality=2),
                metrics_line(point("cacheRead", 250.0, s, s + 2 * m), temporality=2),
                metrics_line(point("cacheRead", 250.0, s, s + 3 * m), temporality=2),
                metrics_line(point("cacheRead", 40.0, s + 4 * m, s + 5 * m), temporality=2),
                metrics_line(point("cacheRead", 90.0, s + 4 * m, s + 6 * m), temporality=2),
            ]
        )
        + "\n"
    )
    ingest(store, [f])
    assert usage(store)["read"] == 340


def test_events_and_metrics_of_one_session_are_never_double_counted(store, tmp_path):
    s = T0 - 10**9
    (tmp_path / "logs.jsonl").write_text(logs_line(event()) + "\n")
    (tmp_path / "metrics.jsonl").write_text(
        metrics_line(
            point("input", 113.0, s, T0 + 10**9),
            point("output", 127.0, s, T0 + 10**9),
            point("cacheRead", 21000.0, s, T0 + 10**9),
            point("cacheCreation", 417.0, s, T0 + 10**9),
            point("input", 50.0, s, T0 + 10**9, session="s2"),
        )
        + "\n"
    )
    ingest(store, [tmp_path])
    assert usage(store) == {"input": 113, "read": 21000, "write": 417, "output": 127, "rows": 1}
    assert usage(store, "s2")["input"] == 50  # a session known only from the metric


def test_reingest_adds_nothing(store, tmp_path):
    s = T0 - 10**9
    (tmp_path / "a.jsonl").write_text(
        "\n".join(
            [
                logs_line(event(request_id="r1"), event(request_id=None)),
                metrics_line(point("input", 9.0, s, T0, session="s9")),
                spans_line(span(request_id="r1")),
            ]
        )
        + "\n"
    )
    first = ingest(store, [tmp_path])
    before = store.query("SELECT count(*), sum(input_tokens), sum(output_tokens) FROM request_usage")
    again = ingest(store, [tmp_path], force=True)
    (tmp_path / "copy.jsonl").write_bytes((tmp_path / "a.jsonl").read_bytes())  # the same batches re-sent
    third = ingest(store, [tmp_path / "copy.jsonl"])
    assert first.requests_added == 2 and first.metric_points_added == 1
    assert again.requests_added == third.requests_added == 0
    assert again.metric_points_added == third.metric_points_added == 0
    assert store.query("SELECT count(*), sum(input_tokens), sum(output_tokens) FROM request_usage") == before


# -- spans ---------------------------------------------------------------------------------------


def test_an_llm_request_span_merges_with_its_event():
    p = parse_lines(lines(logs_line(event()), spans_line(span(), span("claude_code.tool"))), "x")
    [r] = rows(p)
    assert r["source"] == "otlp-log" and r["ttft_ms"] == 14 and r["output_tokens"] == 127
    assert dict(p.unknown) == {"span:claude_code.tool": 1}


def test_a_span_alone_is_a_request_and_merges_with_a_later_event(store, tmp_path):
    (tmp_path / "traces.jsonl").write_text(spans_line(span(), span(request_id=None)) + "\n")
    (tmp_path / "z-logs.jsonl").write_text(logs_line(event()) + "\n")
    p = parse(tmp_path / "traces.jsonl")
    [r] = rows(p)
    assert r["source"] == "otlp-span" and r["ttft_ms"] == 14 and r["model"] == "claude-opus-4-8[1m]"
    assert r["ts"] == T0_DT - dt.timedelta(milliseconds=40) and r["duration_ms"] == 41
    assert dict(p.unknown) == {"span:claude_code.llm_request (no request_id)": 1}
    ingest(store, [tmp_path])
    assert usage(store) == {"input": 113, "read": 21000, "write": 417, "output": 127, "rows": 1}


# -- the decoder never crashes -------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)

# OTLP-shaped documents: the structure the parser walks, with arbitrary leaves (numbers in every
# wire encoding, text, objects, huge and negative values) and, sometimes, arbitrary parts.
NUMBERISH = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(0, 10**6).map(str),
    st.floats(allow_nan=False),
    st.just({}),
    JSON,
)
ANY_VALUE = st.one_of(
    st.builds(lambda k, v: {k: v}, st.sampled_from(["stringValue", "intValue", "doubleValue", "boolValue"]), NUMBERISH),
    st.builds(lambda k, v: {k: v}, st.sampled_from(["arrayValue", "kvlistValue", "bytesValue"]), JSON),
    JSON,
)
KEYS = (
    st.sampled_from(
        [
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_creation_tokens",
            "cache_creation_5m_tokens",
            "request_id",
            "session.id",
            "event.name",
            "type",
            "query_source",
            "event.timestamp",
            "ttft_ms",
            "cost_usd",
        ]
    )
    | st.text(max_size=6)
    | st.none()
)
ATTR = st.fixed_dictionaries({"key": KEYS, "value": ANY_VALUE})
TIME = st.one_of(st.integers(min_value=-(2**65), max_value=2**65).map(str), st.integers(0, 2**64), JSON)


def shaped(strategy, wild=True):
    """Mostly ``strategy``; with ``wild``, sometimes any JSON value in its place."""
    return st.one_of(strategy, strategy, strategy, JSON) if wild else strategy


def _record(wild):
    attrs = shaped(st.lists(shaped(ATTR, wild), max_size=8), wild)
    return shaped(
        st.fixed_dictionaries(
            {"attributes": attrs},
            optional={
                "timeUnixNano": TIME,
                "observedTimeUnixNano": TIME,
                "eventName": JSON,
                "body": st.sampled_from(
                    [{"stringValue": "claude_code.api_request"}, {"stringValue": "claude_code.compaction"}]
                )
                | JSON,
            },
        ),
        wild,
    ), attrs


def _export(wild):
    record, attrs = _record(wild)
    point = shaped(
        st.fixed_dictionaries(
            {"attributes": attrs, "timeUnixNano": TIME},
            optional={"startTimeUnixNano": TIME, "asDouble": NUMBERISH, "asInt": NUMBERISH},
        ),
        wild,
    )
    span = shaped(
        st.fixed_dictionaries(
            {"name": st.just("claude_code.llm_request") | JSON, "attributes": attrs},
            optional={"startTimeUnixNano": TIME, "endTimeUnixNano": TIME},
        ),
        wild,
    )
    metric = shaped(
        st.fixed_dictionaries(
            {
                "name": st.just("claude_code.token.usage") | JSON,
                "sum": shaped(
                    st.fixed_dictionaries(
                        {"dataPoints": shaped(st.lists(point, max_size=3), wild)},
                        optional={"aggregationTemporality": st.sampled_from([1, 2, "2", 0]) | JSON},
                    ),
                    wild,
                ),
            }
        ),
        wild,
    )

    def resource(scopes_key, items_key, item):
        scope = shaped(
            st.fixed_dictionaries({items_key: shaped(st.lists(item, max_size=3), wild)}, optional={"scope": JSON}), wild
        )
        return shaped(
            st.fixed_dictionaries(
                {scopes_key: shaped(st.lists(scope, max_size=2), wild)},
                optional={"resource": shaped(st.fixed_dictionaries({"attributes": attrs}), wild)},
            ),
            wild,
        )

    return st.fixed_dictionaries(
        {},
        optional={
            "resourceLogs": shaped(st.lists(resource("scopeLogs", "logRecords", record), max_size=2), wild),
            "resourceMetrics": shaped(st.lists(resource("scopeMetrics", "metrics", metric), max_size=2), wild),
            "resourceSpans": shaped(st.lists(resource("scopeSpans", "spans", span), max_size=2), wild),
        },
    )


EXPORT = _export(wild=True)
EXPORT_TAME = _export(wild=False)


def _mutate(doc: dict, path_values) -> dict:
    """A valid export with some attribute values (or times) swapped for arbitrary ones."""
    items = doc.get("resourceLogs") or doc.get("resourceMetrics") or doc.get("resourceSpans")
    scope = items[0].get("scopeLogs") or items[0].get("scopeMetrics") or items[0].get("scopeSpans")
    leaves = (
        scope[0].get("logRecords")
        or scope[0].get("spans")
        or scope[0].get("metrics", [{}])[0].get("sum", {}).get("dataPoints")
    )
    for i, (where, value) in enumerate(path_values):
        leaf = leaves[i % len(leaves)]
        if where == "time":
            leaf["timeUnixNano" if "timeUnixNano" in leaf else "startTimeUnixNano"] = value
        else:
            leaf["attributes"][where % len(leaf["attributes"])]["value"] = value
    return doc


_T = 1_795_953_000_000_000_000
VALID = st.sampled_from(
    [
        lambda: json.loads(logs_line(event(), event(request_id=None), event("compaction"))),
        lambda: json.loads(
            metrics_line(point("input", 5.0, _T, _T + 1), point("cacheRead", "7", _T, _T + 2, value_key="asInt"))
        ),
        lambda: json.loads(metrics_line(point("output", 5.0, _T, _T + 1), temporality=2)),
        lambda: json.loads(spans_line(span(), span("claude_code.tool"))),
    ]
)
NEAR_VALID = st.builds(
    lambda make, changes: _mutate(make(), changes),
    VALID,
    st.lists(st.tuples(st.just("time") | st.integers(0, 30), ANY_VALUE | TIME), max_size=3),
)


def _check(values):
    data = b"".join(json.dumps(v).encode() + b"\n" for v in values)
    p = parse_lines(data, "h")
    assert p.lines == len(values)
    for r in p.rejects:
        assert 1 <= r.line <= len(values) and r.reason
    for t in (p.requests, p.metric_points):
        assert t is not None
        for row in t.to_pylist():
            assert row["ingested_from"].startswith("h:") and row["ts"] is not None
            json.loads(row["attributes"])  # stored as JSON: must be valid


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JSON, min_size=1, max_size=6))
def test_arbitrary_json_lines_never_crash_the_decoder(values):
    _check(values)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(EXPORT, min_size=1, max_size=4))
def test_otlp_shaped_json_with_arbitrary_parts_never_crashes_the_decoder(values):
    _check(values)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(EXPORT_TAME, min_size=1, max_size=4))
def test_otlp_structure_with_arbitrary_values_never_crashes_the_decoder(values):
    _check(values)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(NEAR_VALID, min_size=1, max_size=4))
def test_valid_exports_with_some_arbitrary_values_never_crash_the_decoder(values):
    _check(values)


def test_a_gzip_file_that_ends_early_keeps_the_whole_lines_before_the_cut(tmp_path):
    """A writer killed mid-file leaves a truncated .gz: the lines before the damage are stored,
    the damage is one reject."""
    import zlib as _zlib

    from kvtrace.ingest import ingest as _ingest
    from kvtrace.store import Store as _Store

    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "sample_traces" / "otlp" / "logs.jsonl.gz"
    cut = tmp_path / "logs.jsonl.gz"
    cut.write_bytes(src.read_bytes()[:100_000])
    whole_lines = _zlib.decompressobj(31).decompress(cut.read_bytes()).count(b"\n")
    with _Store(memory=True) as store:
        s = _ingest(store, [cut])
        assert s.lines_rejected == 1 and "gzip" in s.rejects[0]
        assert s.requests_added > 0
        kept = store.scalar("SELECT count(DISTINCT split_part(ingested_from, ':', -1)) FROM requests")
    assert 0 < kept <= whole_lines


def test_a_record_without_any_name_is_counted_as_unnamed():
    rec = {"timeUnixNano": "1772409605742000000", "attributes": [{"key": "x", "value": {"stringValue": "y"}}]}
    line = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [rec, rec]}]}]})
    p = otlp_json.parse_lines([line], "mem")
    assert p.requests.num_rows == 0 and not p.rejects
    assert dict(p.unknown) == {"log:(unnamed)": 2}


# -- lines the classification must see for what they are ------------------------------------------


def _seen(p, reach: bool = False) -> tuple:
    """What a parse gives, in a comparable form (``reach``: with how far it read)."""
    out = (
        sorted(rows(p), key=lambda r: (r["request_key"], r["ingested_from"])),
        sorted(p.metric_points.to_pylist(), key=lambda r: r["point_key"]),
        [(r.line, r.reason, r.field) for r in p.rejects],
        dict(p.unknown),
        p.lines,
    )
    return out + (p.read_to, p.lines_read, p.tail_sha256) if reach else out


@pytest.mark.parametrize(
    "odd",
    [
        "{not json",  # not JSON
        '{"resourceLogs": [], "resourceMetrics": '
        + json.dumps(json.loads(metrics_line(point("input", 5.0, T0, T0 + 1)))["resourceMetrics"])
        + "}",
        '{"resourceLogs": [], "resource\\u004detrics": []}',  # an escaped key is the same key
        '{"resourceLogs": [], "resource_logs": []}',  # snake_case beside camelCase
        '{"resourceLogs": [], "resource_logs": null}',  # a null one is absent
        '{"resourceLogs": [], "resourceSpans": ' + json.dumps(json.loads(spans_line(span()))["resourceSpans"]) + "}",
        '{"resourceLogs": [{"scopeLogs": [{"logRecords": [1]}]}]} trailing',
    ],
)
def test_an_odd_line_among_log_lines_is_classified_and_the_others_are_read(odd):
    data = lines(logs_line(event(request_id="a")), odd, logs_line(event(request_id="b")))
    assert {r["request_id"] for r in rows(parse_lines(data, "h"))} >= {"a", "b"}


# -- a file read in pieces -----------------------------------------------------------------------


def _file_in_pieces(tmp_path, monkeypatch, data: bytes) -> tuple:
    """``parse`` of a file cut into pieces of about 3000 bytes, and of the same lines in one piece."""
    f = tmp_path / "otel.jsonl"
    f.write_bytes(data)
    whole = _seen(parse(f), reach=True)
    _small_pieces(monkeypatch)
    return _seen(parse(f), reach=True), whole


def _small_pieces(monkeypatch) -> None:
    """Files read in pieces of about 3000 bytes."""
    monkeypatch.setattr(otlp_json, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(otlp_common, "FIRST_PIECE", 3000)


def test_log_lines_in_many_pieces_read_as_in_one(tmp_path, monkeypatch):
    data = lines(*(logs_line(event(request_id=f"r{i}"), event("user_prompt")) for i in range(40)))
    pieces, whole = _file_in_pieces(tmp_path, monkeypatch, data)
    assert pieces == whole and len(pieces[0]) == 40


@pytest.mark.parametrize("odd_at", [3, 25, 39])
def test_a_bad_line_in_any_piece_is_rejected_and_the_rest_read(tmp_path, monkeypatch, odd_at):
    ls = [logs_line(event(request_id=f"r{i}")) for i in range(40)]
    ls[odd_at] = "{not json"
    pieces, whole = _file_in_pieces(tmp_path, monkeypatch, lines(*ls))
    assert pieces == whole and len(pieces[0]) == 39 and pieces[2] == [(odd_at + 1, "invalid JSON", None)]


def test_pieces_of_every_signal_and_a_torn_last_line(tmp_path, monkeypatch):
    ls = [logs_line(event(request_id=f"r{i}")) for i in range(30)]
    ls += [metrics_line(point("input", 5.0, T0 + i, T0 + i + 1, session=f"m{i}")) for i in range(10)]
    ls += [logs_line(event(request_id=f"q{i}")) for i in range(10)]
    pieces, whole = _file_in_pieces(tmp_path, monkeypatch, lines(*ls) + b'{"resourceLogs": [')
    assert pieces == whole
    assert len(pieces[0]) == 40 and len(pieces[1]) == 10 and pieces[2][-1][0] == 51  # the torn last line


def test_codex_events_among_claude_code_events_in_pieces(tmp_path, monkeypatch):
    codex = [x.decode() for x in fixture_lines(CODEX[0], "logs")]
    ls = [logs_line(event(request_id=f"r{i}")) for i in range(20)] + codex
    pieces, whole = _file_in_pieces(tmp_path, monkeypatch, lines(*ls))
    assert pieces == whole and any(r["agent"] == "codex" for r in pieces[0])


def test_a_read_error_in_a_piece_is_raised_as_itself(tmp_path, monkeypatch):
    _small_pieces(monkeypatch)
    f = tmp_path / "otel.jsonl"
    f.write_bytes(lines(*(logs_line(event(request_id=f"r{i}")) for i in range(40))))
    real, calls = otlp_json.lines_table, []

    def failing(data, first):
        calls.append(first)
        if len(calls) == 4:
            raise OSError("disk went away")
        return real(data, first)

    monkeypatch.setattr(otlp_json, "lines_table", failing)
    with pytest.raises(OSError, match="disk went away"):
        parse(f)
