"""Codex, Gemini CLI and GenAI/OpenInference telemetry in OTLP JSON (kvtrace.ingest.otlp_json).

The Codex and Gemini fixtures were exported by the real CLIs against stub APIs; the GenAI spans
by the real OpenTelemetry SDK. ``expected.json`` holds each request's disjoint buckets, so every
check is per request and exact. Variants (clips, bad counts) are edits of the real records.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from kvtrace.ingest.otlp_json import parse, parse_lines

from tests.agent_exports import CODEX, FIX, GEMINI, GENAI, lines, signal

BUCKETS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def expected(d: Path) -> dict:
    return json.loads((d / "expected.json").read_text())


def buckets(r: dict) -> tuple[int, int, int, int]:
    write = r["cache_write_5m_tokens"] + r["cache_write_1h_tokens"] + r["cache_write_unknown_tokens"]
    return r["input_tokens"], r["cache_read_tokens"], write, r["output_tokens"]


def want(r: dict) -> tuple[int, int, int, int]:
    return tuple(r[k] for k in BUCKETS)


def rows(parsed, agent: str) -> list[dict]:
    return [r for r in (parsed.requests.to_pylist() if parsed.requests is not None else []) if r["agent"] == agent]


# -- Codex ------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
@pytest.mark.parametrize("sig", ["logs", "traces"])
def test_codex_events_and_spans_give_the_served_usage_per_response(d, sig):
    exp = expected(d)
    p = parse(signal(d, sig))
    assert not p.rejects, [r.describe() for r in p.rejects]
    got = rows(p, "codex")
    assert sorted((r["session_id"], r["model"], *buckets(r)) for r in got) == sorted(
        (w["session_id"], w["model"], *want(w)) for w in exp["requests"].values()
    )
    assert {r["source"] for r in got} == {"otlp-log" if sig == "logs" else "otlp-span"}


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_codex_events_spans_and_rollouts_of_one_response_share_a_key(d):
    from kvtrace.ingest.codex_rollout import parse as parse_rollouts

    keys = [{r["request_key"] for r in rows(parse(signal(d, s)), "codex")} for s in ("logs", "traces")]
    rollout = {r["request_key"] for r in parse_rollouts(sorted((d / "sessions").rglob("*.jsonl"))).requests.to_pylist()}
    assert keys[0] == keys[1] == rollout and len(rollout) == len(expected(d)["requests"])


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_codex_unknown_records_are_counted_by_event_name(d):
    p = parse(signal(d, "logs"))
    names = Counter()
    for line in lines(d, "logs"):
        for rl in json.loads(line)["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for rec in sl["logRecords"]:
                    a = {x["key"]: x["value"] for x in rec.get("attributes", [])}
                    if "event.name" in a and "input_token_count" not in a:
                        names["event:" + a["event.name"]["stringValue"]] += 1
    assert {k: p.unknown[k] for k in names} == dict(names)
    assert p.unknown["event:codex.api_request"] == len(expected(d)["requests"])


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_codex_turn_token_usage_points_are_stored_in_disjoint_types(d):
    p = parse(signal(d, "metrics"))
    assert not p.rejects
    pts = [r for r in p.metric_points.to_pylist() if r["metric"] == "codex.turn.token_usage"]
    sums = Counter()
    for r in pts:
        sums[r["token_type"]] += r["value"]
        assert (r["agent"], r["session_id"], r["temporality"]) == ("codex", None, 1)
    t = expected(d)["totals"]
    assert dict(sums) == {
        "input": t["input_tokens"],
        "cacheRead": t["cache_read_tokens"],
        "cacheCreation": t["cache_write_tokens"],
        "output": t["output_tokens"],
    }


def _edit_logs(d: Path, key: str, value: dict) -> list[str]:
    """The log lines with every ``key`` attribute replaced by ``value``."""
    out = []
    for line in lines(d, "logs"):
        obj = json.loads(line)
        for rl in obj["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for rec in sl["logRecords"]:
                    for a in rec.get("attributes", []):
                        if a["key"] == key:
                            a["value"] = value
        out.append(json.dumps(obj))
    return out


def test_a_codex_input_below_its_cached_tokens_is_clipped_and_reported():
    d = CODEX[0]
    p = parse_lines(_edit_logs(d, "input_token_count", {"stringValue": "5"}), "edited")
    got = rows(p, "codex")
    assert len(got) == len(expected(d)["requests"]) and all(r["input_tokens"] == 0 for r in got)
    assert [r.field for r in p.rejects] == ["input_token_count"] * len(got)
    assert all("stored as 0" in r.reason for r in p.rejects)


def test_a_codex_count_that_is_not_a_number_rejects_the_record():
    d = CODEX[0]
    p = parse_lines(_edit_logs(d, "output_token_count", {"stringValue": "lots"}), "edited")
    assert not rows(p, "codex")
    assert [(r.field, r.reason) for r in p.rejects] == [("output_token_count", "not a token count: lots")] * len(
        expected(d)["requests"]
    )


# -- Gemini CLI -------------------------------------------------------------------------------


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_gemini_events_give_the_served_usage_per_response(d):
    exp = expected(d)
    p = parse(signal(d, "logs"))
    assert not p.rejects, [r.describe() for r in p.rejects]
    got = rows(p, "gemini-cli")
    lane_qs = {"main": "main", "utility": "auxiliary"}
    assert sorted((r["model"], r["query_source"], *buckets(r)) for r in got) == sorted(
        (w["model"], lane_qs[w["lane"]], *want(w)) for w in exp["requests"].values()
    )
    assert {r["session_id"] for r in got} == {exp["session_id"]}
    # its copy of each response as a GenAI event (no cache counts) is counted, not read
    assert p.unknown["log:gen_ai.client.inference.operation.details"] > 0


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_gemini_events_and_chat_logs_of_one_response_share_a_key(d):
    from kvtrace.ingest.gemini_chats import parse as parse_chats

    events = {r["request_key"]: r for r in rows(parse(signal(d, "logs")), "gemini-cli")}
    chats = {r["request_key"] for r in parse_chats(sorted((d / "tmp").rglob("session-*"))).requests.to_pylist()}
    assert chats and chats == {k for k, r in events.items() if r["query_source"] == "main"}


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_gemini_token_usage_metric_alone_gives_the_served_totals(d, store):
    """Cumulative points, one series per type; the warehouse differences them per series."""
    s = ingest(store, [signal(d, "metrics")])
    assert s.metric_points_added > 0 and s.requests_added == 0
    got = store.query(
        "SELECT sum(input_tokens), sum(cache_read_tokens), sum(cache_write_unknown_tokens), "
        "sum(output_tokens) FROM request_usage WHERE agent = 'gemini-cli'"
    )[0]
    t = expected(d)["totals"]["all"]
    assert tuple(int(x) for x in got) == tuple(t[k] for k in BUCKETS)


# -- GenAI / OpenLLMetry / OpenInference spans -------------------------------------------------


def test_genai_spans_give_the_usage_they_were_given_per_span():
    exp = expected(GENAI)
    p = parse(GENAI / "traces.jsonl")
    assert not p.rejects, [r.describe() for r in p.rejects]
    got = {r["request_key"]: r for r in p.requests.to_pylist()}
    reqs = [s for s in exp["spans"] if s["request"]]
    assert len(got) == len(reqs)
    for s in reqs:
        g = got[f"span:{s['trace_id']}:{s['span_id']}"]
        assert buckets(g) == want(s), s["name"]
        assert (g["agent"], g["session_id"], g["model"]) == (s["agent"], s["session_id"], s["model"]), s["name"]
        assert g["request_id"] == s["attributes"].get("gen_ai.response.id")


def test_genai_spans_that_are_not_requests_are_counted_by_name():
    exp = expected(GENAI)
    p = parse(GENAI / "traces.jsonl")
    assert Counter(f"span:{s['name']}" for s in exp["spans"] if not s["request"]) == Counter(
        {k: v for k, v in p.unknown.items() if k.startswith("span:")}
    )


def test_the_protobuf_bodies_and_their_json_give_the_same_rows():
    """traces.pb holds the SDK's raw bodies; decoded by the collector's code they are the same."""
    import sys

    sys.path.insert(0, str(FIX / "capture"))
    from otlp_sink import protobuf_to_otlp_json, read_length_prefixed

    decoded = [json.dumps(protobuf_to_otlp_json("traces", b)) for b in read_length_prefixed(GENAI / "traces.pb")]
    a = sorted((r["request_key"], buckets(r)) for r in parse_lines(decoded, "pb").requests.to_pylist())
    b = sorted((r["request_key"], buckets(r)) for r in parse(GENAI / "traces.jsonl").requests.to_pylist())
    assert a == b and a


def _span_line(attrs: dict, name: str = "chat m", service: str = "app") -> str:
    def value(v):
        if isinstance(v, str):
            return {"stringValue": v}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"intValue": str(v)}

    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": "0af7651916cd43dd8448eb211c80319c",
                                    "spanId": "b7ad6b7169203331",
                                    "name": name,
                                    "startTimeUnixNano": "1790000000000000000",
                                    "endTimeUnixNano": "1790000001000000000",
                                    "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
                                }
                            ]
                        }
                    ],
                }
            ]
        }
    )


def test_a_span_that_reports_input_without_its_cached_tokens_is_clipped_and_reported():
    """Anthropic's own convention (input excludes the cache) under GenAI names: visible, not hidden."""
    p = parse_lines(
        [
            _span_line(
                {
                    "gen_ai.usage.input_tokens": 3,
                    "gen_ai.usage.output_tokens": 50,
                    "gen_ai.usage.cache_read.input_tokens": 9000,
                    "gen_ai.usage.cache_creation.input_tokens": 400,
                }
            )
        ],
        "x",
    )
    [r] = p.requests.to_pylist()
    assert buckets(r) == (0, 9000, 400, 50)
    [rej] = p.rejects
    assert rej.field == "gen_ai.usage.input_tokens" and "stored as 0" in rej.reason


def test_span_counts_are_read_by_name_whatever_the_wire_type():
    p = parse_lines(
        [
            _span_line(
                {
                    "llm.token_count.prompt": "1200",
                    "llm.token_count.completion": 30.0,
                    "llm.token_count.prompt_details.cache_read": 1000,
                    "openinference.span.kind": "LLM",
                }
            )
        ],
        "x",
    )
    [r] = p.requests.to_pylist()
    assert (buckets(r), r["agent"]) == ((200, 1000, 0, 30), "openinference")
    bad = parse_lines([_span_line({"gen_ai.usage.input_tokens": "many", "gen_ai.usage.output_tokens": 1})], "x")
    assert not rows(bad, "genai") and bad.rejects[0].field == "gen_ai.usage.input_tokens"


# -- the warehouse ------------------------------------------------------------------------------


def test_a_session_less_metric_point_counts_only_without_request_rows_of_its_user_and_window(store):
    """codex.turn.token_usage has no session id: it must not double the request rows it repeats, and
    must not be dropped because of other users' requests or requests outside its window."""
    day = dt.datetime(2026, 11, 2, 10)
    store.run(
        "INSERT INTO requests (request_key, ts, source, agent, session_id, user_id, input_tokens, ingested_from) "
        "VALUES ('r1', ?, 't', 'codex', 's1', 'alice', 7, 't:1')",
        [day],
    )
    points = (  # (time, user, value): the repeat of r1; later that day; another user at the same time
        (day + dt.timedelta(seconds=20), "alice", 7),
        (day + dt.timedelta(hours=1), "alice", 5),
        (day + dt.timedelta(seconds=20), "bob", 11),
    )
    for i, (when, user, value) in enumerate(points):
        store.run(
            "INSERT INTO metric_points VALUES (?, 'codex.turn.token_usage', ?, 1, ?, ?, ?, 'input', "
            "'otlp-metric', 'codex', NULL, ?, NULL, 'm', NULL, NULL, 't:1')",
            [f"p{i}", f"series{i}", when - dt.timedelta(seconds=30), when, value, user],
        )
    got = store.query("SELECT user_id, sum(input_tokens) FROM request_usage GROUP BY 1 ORDER BY 1")
    assert [(u, int(n)) for u, n in got] == [("alice", 7 + 5), ("bob", 11)]


def test_all_codex_sources_together_store_each_response_once(store):
    paths = [p for d in CODEX for p in (signal(d, "logs"), signal(d, "traces"), signal(d, "metrics"), d / "sessions")]
    ingest(store, paths)
    n = sum(len(expected(d)["requests"]) for d in CODEX)
    assert store.scalar("SELECT count(*) FROM requests WHERE agent = 'codex'") == n
    got = store.query(
        "SELECT sum(input_tokens), sum(cache_read_tokens), sum(cache_write_unknown_tokens), "
        "sum(output_tokens), count(*) FROM request_usage WHERE agent = 'codex'"
    )[0]
    t = [expected(d)["totals"] for d in CODEX]
    assert tuple(int(x) for x in got) == tuple(sum(x[k] for x in t) for k in BUCKETS) + (n,)


def test_all_gemini_sources_together_store_each_response_once(store):
    paths = [p for d in GEMINI for p in (signal(d, "logs"), signal(d, "metrics"), d / "tmp")]
    ingest(store, paths)
    n = sum(len(expected(d)["requests"]) for d in GEMINI)
    got = store.query(
        "SELECT sum(input_tokens), sum(cache_read_tokens), sum(cache_write_unknown_tokens), "
        "sum(output_tokens), count(*), count(*) FILTER (WHERE from_metric) "
        "FROM request_usage WHERE agent = 'gemini-cli'"
    )[0]
    t = [expected(d)["totals"]["all"] for d in GEMINI]
    assert tuple(int(x) for x in got) == tuple(sum(x[k] for x in t) for k in BUCKETS) + (n, 0)
    # the chat log's message id joins the event's row
    assert store.scalar("SELECT count(*) FROM requests WHERE agent = 'gemini-cli' AND message_id IS NOT NULL") == sum(
        1 for d in GEMINI for r in expected(d)["requests"].values() if r["lane"] == "main"
    )


def test_a_file_mixing_agents_and_signals_reads_the_same_in_small_chunks(tmp_path, monkeypatch):
    """Chunks hold different signals: a query skipped on a chunk without its lines loses nothing."""
    import kvtrace.ingest.otlp_json as otlp_json

    mixed = tmp_path / "all.jsonl"
    parts = [lines(FIX / "claude_code" / "tool_call", s) for s in ("logs", "metrics", "traces")]
    parts += [lines(d, s) for d in CODEX + GEMINI for s in ("logs", "metrics", "traces")]
    parts.append(lines(GENAI, "traces"))
    mixed.write_bytes(b"".join(x + b"\n" for part in parts for x in part))

    def summary(p):
        return (
            sorted((r["request_key"], buckets(r)) for r in p.requests.to_pylist()),
            sorted(r["point_key"] for r in p.metric_points.to_pylist()),
            dict(p.unknown),
            len(p.rejects),
        )

    whole = summary(parse(mixed))
    monkeypatch.setattr(otlp_json, "CHUNK_BYTES", 64 << 10)
    assert summary(parse(mixed)) == whole
    assert {k.split(":")[0] for k, _ in whole[0]} >= {"codex", "gemini", "span"}
