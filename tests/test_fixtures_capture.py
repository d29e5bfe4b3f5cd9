"""The real-client fixture tooling: the stub Messages API, the OTLP sink, and the captured fixtures.

The fixture checks read the committed captures of the Claude Code CLI and make sure each one is
coherent with what the stub says it served (keyed by request id), so a bad re-capture fails here
before it misleads a parser test.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURE = Path(__file__).parent / "fixtures" / "capture"
FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
REPO = Path(__file__).parents[1]
sys.path.insert(0, str(CAPTURE))

from otlp_sink import OtlpSink, read_length_prefixed  # noqa: E402
from stub_anthropic import COMPACT_MARKER, Reply, ScriptedResponder, StubAnthropic  # noqa: E402

MAIN_BODY = {
    "model": "claude-test",
    "max_tokens": 100,
    "stream": True,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=0; cc_entrypoint=sdk-cli;"},
        {"type": "text", "text": "You are a test.", "cache_control": {"type": "ephemeral"}},
    ],
    "tools": [{"name": "Agent"}, {"name": "Bash"}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    "metadata": {"user_id": json.dumps({"session_id": "sess-1"})},
}


def _post(url: str, path: str, body: bytes, headers: dict[str, str]):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp, data


def _messages(stub: StubAnthropic, body: dict):
    return _post(stub.url, "/v1/messages?beta=true", json.dumps(body).encode(), {"content-type": "application/json"})


def _sse(data: bytes) -> list[tuple[str, dict]]:
    events = []
    for chunk in data.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_stub_streams_usage_like_the_api():
    with StubAnthropic(ScriptedResponder({"main": [Reply.text("hello there")]}), name="t") as stub:
        resp, data = _messages(stub, MAIN_BODY)
        served = stub.expected()
    assert resp.status == 200
    assert resp.getheader("content-type").startswith("text/event-stream")
    events = _sse(data)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 1
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "hello there"
    rid = resp.getheader("request-id")
    row = served["requests"][rid]
    start = events[0][1]["message"]
    assert start["id"] == row["message_id"] and start["id"].startswith("msg_01")
    usage = start["usage"]
    assert usage["input_tokens"] == row["input_tokens"]
    assert usage["cache_read_input_tokens"] == row["cache_read_tokens"]
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": row["cache_creation_5m_tokens"],
        "ephemeral_1h_input_tokens": row["cache_creation_1h_tokens"],
    }
    assert usage["cache_creation_input_tokens"] == row["cache_creation_tokens"]
    delta = events[-2][1]
    assert delta["usage"]["output_tokens"] == row["output_tokens"] != usage["output_tokens"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert row["lane"] == "main" and row["session_id"] == "sess-1"


def test_stub_tool_use_without_streaming():
    reply = Reply.tool("Bash", {"command": "echo hi"}, text="running")
    with StubAnthropic(ScriptedResponder({"main": [reply]}), name="t") as stub:
        resp, data = _messages(stub, {**MAIN_BODY, "stream": False})
    msg = json.loads(data)
    assert resp.status == 200 and msg["stop_reason"] == "tool_use"
    tool = msg["content"][1]
    assert tool["type"] == "tool_use" and tool["id"].startswith("toolu_01")
    assert tool["input"] == {"command": "echo hi"}
    assert msg["usage"]["output_tokens"] > 1


def test_stub_error_once_then_success():
    script = {"main": [Reply.error(529), Reply.text("ok")]}
    with StubAnthropic(ScriptedResponder(script), name="t") as stub:
        first, body = _messages(stub, MAIN_BODY)
        second, _ = _messages(stub, MAIN_BODY)
        served = stub.expected()
    assert first.status == 529
    err = json.loads(body)
    assert err["type"] == "error" and err["error"]["type"] == "overloaded_error"
    assert err["request_id"] == first.getheader("request-id")
    assert second.status == 200
    statuses = [served["requests"][r]["status"] for r in served["order"]]
    assert statuses == [529, 200]
    assert len(set(served["order"])) == 2


def test_stub_sorts_requests_into_lanes_and_chains_prefixes():
    sub = {**MAIN_BODY, "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_is_subagent=true;"}]}
    aux = {k: v for k, v in MAIN_BODY.items() if k != "tools"}
    compact = {
        **MAIN_BODY,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Your task is to " + COMPACT_MARKER + "."}]}
        ],
    }
    with StubAnthropic(name="t") as stub:
        for body in (MAIN_BODY, sub, MAIN_BODY, aux, compact, sub):
            assert _messages(stub, body)[0].status == 200
        rows = [stub.expected()["requests"][r] for r in stub.expected()["order"]]
    assert [r["lane"] for r in rows] == ["main", "subagent", "main", "auxiliary", "compact", "subagent"]
    assert [r["thread"] for r in rows] == ["main", "subagent", "main", "auxiliary", "main", "subagent"]
    for thread in ("main", "subagent"):
        chain = [r for r in rows if r["thread"] == thread]
        for prev, cur in zip(chain, chain[1:]):
            assert cur["cache_read_tokens"] == prev["cache_read_tokens"] + prev["cache_creation_tokens"]
    for key in ("input_tokens", "output_tokens", "message_id"):
        assert len({r[key] for r in rows}) == len(rows)


def test_stub_answers_count_tokens_and_404s_the_rest():
    with StubAnthropic(name="t") as stub:
        resp, data = _post(stub.url, "/v1/messages/count_tokens", b'{"messages": []}', {})
        assert resp.status == 200 and json.loads(data)["input_tokens"] >= 1
        resp, data = _post(stub.url, "/v1/nope", b"", {})
        assert resp.status == 404 and json.loads(data)["error"]["type"] == "not_found_error"
        assert resp.getheader("request-id").startswith("req_01")


def test_sink_writes_chunked_gzip_json_as_one_line(tmp_path):
    body = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "body": {"stringValue": "claude_code.api_request"},
                                "attributes": [{"key": "input_tokens", "value": {"intValue": 7}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    raw = gzip.compress(json.dumps(body, indent=2).encode())
    with OtlpSink(tmp_path) as sink:
        host, port = sink.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.putrequest("POST", "/v1/logs")
        conn.putheader("content-type", "application/json")
        conn.putheader("content-encoding", "gzip")
        conn.putheader("transfer-encoding", "chunked")
        conn.endheaders()
        for i in range(0, len(raw), 50):
            part = raw[i : i + 50]
            conn.send(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        conn.send(b"0\r\n\r\n")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read()) == {}
        bad, _ = _post(sink.url, "/v1/logs", b"x", {"content-type": "text/plain"})
        junk, _ = _post(sink.url, "/v1/logs", b"{not json", {"content-type": "application/json"})
    lines = (tmp_path / "logs.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == body
    assert bad.status == 415 and junk.status == 400


def test_sink_decodes_protobuf_with_hex_ids_and_keeps_raw_bodies(tmp_path):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = bytes.fromhex("f95d1cf5aa1fae4a3446d1738362141e")
    span.span_id = bytes.fromhex("d07844281f5a5d3b")
    span.name = "claude_code.llm_request"
    attr = span.attributes.add()
    attr.key, attr.value.int_value = "input_tokens", 1013
    raw = req.SerializeToString()
    with OtlpSink(tmp_path) as sink:
        resp, _ = _post(sink.url, "/v1/traces", raw, {"content-type": "application/x-protobuf"})
    assert resp.status == 200
    line = json.loads((tmp_path / "traces.jsonl").read_text())
    out = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert out["traceId"] == "f95d1cf5aa1fae4a3446d1738362141e"
    assert out["spanId"] == "d07844281f5a5d3b"
    assert out["attributes"][0]["value"] == {"intValue": "1013"}
    assert read_length_prefixed(tmp_path / "traces.pb") == [raw]


# -- the committed captures -----------------------------------------------------------------

SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists()) if FIXTURES.exists() else []


def _records(path: Path, kind: str):
    """Yield (record, {key: (wire type, value)}) from an OTLP JSON lines file."""
    if not path.exists():
        return
    outer, scope, items = {
        "logs": ("resourceLogs", "scopeLogs", "logRecords"),
        "traces": ("resourceSpans", "scopeSpans", "spans"),
    }[kind]
    for line in path.read_text().splitlines():
        for r in json.loads(line)[outer]:
            for s in r[scope]:
                for rec in s[items]:
                    attrs = {a["key"]: next(iter(a["value"].items())) for a in rec["attributes"]}
                    yield rec, attrs


def _num(wire: tuple[str, object]) -> float:
    return float(wire[1])


def _events(scenario: str, name: str) -> list[dict]:
    return [a for _, a in _records(FIXTURES / scenario / "logs.jsonl", "logs") if a["event.name"][1] == name]


def _transcript_assistants(scenario: str) -> list[tuple[Path, dict]]:
    out = []
    for f in sorted((FIXTURES / scenario / "projects").rglob("*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "assistant":
                out.append((f, rec))
    return out


def test_fixtures_exist_and_stay_small():
    assert {"multi_turn", "tool_call", "tool_call_protobuf", "subagent", "cumulative", "retry"} <= set(SCENARIOS)
    total = sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file())
    assert total < 1_000_000


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixture_api_request_events_match_what_the_stub_served(scenario):
    expected = json.loads((FIXTURES / scenario / "expected.json").read_text())
    events = {a["request_id"][1]: a for a in _events(scenario, "api_request")}
    assert set(events) == set(expected["requests"])
    for rid, row in expected["requests"].items():
        ev = events[rid]
        assert _num(ev["input_tokens"]) == row["input_tokens"]
        assert _num(ev["output_tokens"]) == row["output_tokens"]
        assert _num(ev["cache_read_tokens"]) == row["cache_read_tokens"]
        # events carry only the 5m + 1h sum; the split is in transcripts alone
        assert _num(ev["cache_creation_tokens"]) == row["cache_creation_tokens"]
    failed = {a["request_id"][1] for a in _events(scenario, "api_error")}
    assert failed <= set(expected["errors"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixture_transcripts_match_what_the_stub_served(scenario):
    expected = json.loads((FIXTURES / scenario / "expected.json").read_text())
    seen = set()
    for path, rec in _transcript_assistants(scenario):
        msg = rec["message"]
        if msg.get("model") == "<synthetic>":
            assert rec.get("isApiErrorMessage") and rec["requestId"] in expected["errors"]
            continue
        row = expected["requests"][rec["requestId"]]
        seen.add(rec["requestId"])
        assert msg["id"] == row["message_id"]
        u = msg["usage"]
        assert u["cache_creation"] == {
            "ephemeral_5m_input_tokens": row["cache_creation_5m_tokens"],
            "ephemeral_1h_input_tokens": row["cache_creation_1h_tokens"],
        }
        assert (u["input_tokens"], u["cache_read_input_tokens"], u["output_tokens"]) == (
            row["input_tokens"],
            row["cache_read_tokens"],
            row["output_tokens"],
        )
        assert rec["isSidechain"] == (row["thread"] == "subagent")
        assert ("subagents" in path.parts) == (row["thread"] == "subagent")
    # compaction answers become a summary record, not an assistant record
    missing = {expected["requests"][r]["lane"] for r in set(expected["requests"]) - seen}
    assert missing <= {"compact"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixture_token_metrics_add_up_to_the_served_totals(scenario):
    expected = json.loads((FIXTURES / scenario / "expected.json").read_text())
    cumulative = expected["temporality"] == "cumulative"
    sums: dict[str, float] = {}
    last: dict[tuple, float] = {}
    for line in (FIXTURES / scenario / "metrics.jsonl").read_text().splitlines():
        for rm in json.loads(line)["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for m in sm["metrics"]:
                    if m["name"] != "claude_code.token.usage":
                        continue
                    assert m["sum"]["aggregationTemporality"] == (2 if cumulative else 1)
                    for p in m["sum"]["dataPoints"]:
                        attrs = {a["key"]: next(iter(a["value"].values())) for a in p["attributes"]}
                        if cumulative:
                            last[tuple(sorted(attrs.items()))] = float(p["asDouble"])
                        else:
                            sums[attrs["type"]] = sums.get(attrs["type"], 0) + float(p["asDouble"])
    if cumulative:
        for key, value in last.items():
            t = dict(key)["type"]
            sums[t] = sums.get(t, 0) + value
    total = expected["totals"]["all"]
    assert sums == {
        "input": total["input_tokens"],
        "output": total["output_tokens"],
        "cacheRead": total["cache_read_tokens"],
        "cacheCreation": total["cache_creation_tokens"],
    }


def test_protobuf_fixture_bodies_decode_to_the_json_lines():
    sys.path.insert(0, str(CAPTURE))
    from otlp_sink import protobuf_to_otlp_json

    folder = FIXTURES / "tool_call_protobuf"
    for signal in ("logs", "metrics", "traces"):
        bodies = read_length_prefixed(folder / f"{signal}.pb")
        lines = (folder / f"{signal}.jsonl").read_text().splitlines()
        assert len(bodies) == len(lines) >= 1
        for body, line in zip(bodies, lines):
            assert protobuf_to_otlp_json(signal, body) == json.loads(line)
    spans = [rec for rec, _ in _records(folder / "traces.jsonl", "traces")]
    assert spans and all(len(s["traceId"]) == 32 and int(s["traceId"], 16) for s in spans)


@pytest.mark.slow
def test_capture_runs_the_real_cli(tmp_path):
    claude = REPO / "node_modules" / ".bin" / "claude"
    if not claude.exists():
        pytest.skip("node_modules/.bin/claude missing: run `make tools`")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a loopback-only network namespace")
    proc = subprocess.run(
        [sys.executable, str(CAPTURE / "capture.py"), "-s", "retry", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "network namespace: loopback only" in proc.stdout
    expected = json.loads((tmp_path / "retry" / "expected.json").read_text())
    assert [r["status"] for r in (expected["requests"] | expected["errors"]).values()]
    assert len(expected["requests"]) == 2 and len(expected["errors"]) == 4


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ccusage_reads_the_fixture_transcripts_as_served(scenario, tmp_path):
    """ccusage (the reference transcript reader) agrees with the stub, compaction aside."""
    ccusage = REPO / "node_modules" / ".bin" / "ccusage"
    if not ccusage.exists():
        pytest.skip("node_modules/.bin/ccusage missing: run `make tools`")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(FIXTURES / scenario)}
    proc = subprocess.run(
        [str(ccusage), "daily", "--json", "--offline"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    totals = json.loads(proc.stdout)["totals"]
    expected = json.loads((FIXTURES / scenario / "expected.json").read_text())
    # a compaction answer is never written as an assistant record, so transcripts miss it
    rows = [r for r in expected["requests"].values() if r["lane"] != "compact"]
    assert (
        totals["inputTokens"],
        totals["cacheReadTokens"],
        totals["cacheCreationTokens"],
        totals["outputTokens"],
    ) == (
        sum(r["input_tokens"] for r in rows),
        sum(r["cache_read_tokens"] for r in rows),
        sum(r["cache_creation_tokens"] for r in rows),
        sum(r["output_tokens"] for r in rows),
    )
