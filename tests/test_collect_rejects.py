"""One judge of records: the collector stores every record of a request it can decode, and its
worker's ingest of the spool rejects exactly what ``kvtrace ingest`` of the same record rejects,
for every agent family ingest reads (Claude Code events, token.usage points and llm_request
spans; Codex and Gemini CLI events and metrics; GenAI spans), in both wire encodings.

A second copy of any reject rule in the receiver (dropping records, or a partial success) would
make the worker's counts differ from the reference ingest's here."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from kvtrace.collect import otlp, worker
from tests import agent_exports as ax
from tests.collect_support import as_protobuf, post, reasons, receive, running_collector
from tests.otlp_records import T0, event, logs_line, metrics_line, point, span, spans_line


def _with_attr(line: bytes | str, key: str, value: dict) -> bytes:
    """Every attribute ``key`` of a request set to ``value`` (an AnyValue)."""

    def walk(node):
        if isinstance(node, dict):
            if node.get("key") == key and "value" in node:
                node["value"] = value
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    obj = orjson.loads(line)
    walk(obj)
    return orjson.dumps(obj)


def _with_points(line: bytes | str, value: float) -> bytes:
    """Every data point of a metrics request given the value ``value`` (a histogram's: its sum)."""
    obj = orjson.loads(line)
    for rm in obj["resourceMetrics"]:
        for sm in rm["scopeMetrics"]:
            for m in sm["metrics"]:
                for kind, data in m.items():
                    for p in data.get("dataPoints", []) if isinstance(data, dict) else []:
                        if kind == "histogram":
                            p["sum"] = value
                        else:
                            p.pop("asInt", None)
                            p["asDouble"] = value
    return orjson.dumps(obj)


MANY = {"stringValue": "many"}
CODEX, GEMINI = ax.CODEX[0], ax.GEMINI[0]

# (case, signal, one OTLP JSON line, whether ingest rejects something in it)
CASES = [
    ("claude-event", "logs", logs_line(event()), False),
    ("claude-event-bad-count", "logs", logs_line(event(input_tokens="many")), True),
    # a time ingest cannot read (the collector once accepted it)
    ("claude-event-bad-time", "logs", logs_line(event(time_ns=None, **{"event.timestamp": "20260302T091202Z"})), True),
    ("claude-point", "metrics", metrics_line(point("input", 12, T0 - 60_000_000_000, T0)), False),
    ("claude-point-negative", "metrics", metrics_line(point("input", -3.5, T0 - 60_000_000_000, T0)), True),
    ("claude-span", "traces", spans_line(span()), False),
    ("claude-span-bad-count", "traces", spans_line(span(output_tokens="x")), True),
    ("codex-event", "logs", ax.lines(CODEX, "logs")[0], False),
    ("codex-event-bad-count", "logs", _with_attr(ax.lines(CODEX, "logs")[0], "input_token_count", MANY), True),
    ("codex-metrics", "metrics", ax.lines(CODEX, "metrics")[0], False),
    ("codex-metrics-negative", "metrics", _with_points(ax.lines(CODEX, "metrics")[0], -1.0), True),
    ("codex-spans", "traces", ax.lines(CODEX, "traces")[0], False),
    (
        "codex-spans-bad-count",
        "traces",
        _with_attr(ax.lines(CODEX, "traces")[0], "gen_ai.usage.input_tokens", MANY),
        True,
    ),
    ("gemini-event", "logs", ax.lines(GEMINI, "logs")[0], False),
    ("gemini-event-bad-count", "logs", _with_attr(ax.lines(GEMINI, "logs")[0], "input_token_count", MANY), True),
    ("gemini-metrics", "metrics", ax.lines(GEMINI, "metrics")[0], False),
    ("gemini-metrics-negative", "metrics", _with_points(ax.lines(GEMINI, "metrics")[0], -1.0), True),
    ("genai-spans", "traces", ax.lines(ax.GENAI, "traces")[0], False),
    (
        "genai-spans-bad-count",
        "traces",
        _with_attr(ax.lines(ax.GENAI, "traces")[0], "gen_ai.usage.input_tokens", MANY),
        True,
    ),
]
COUNTS = ("requests_added", "metric_points_added", "lines_rejected")


def _records(signal: str, line: bytes | str) -> int:
    """Records in a request, counted from the JSON tree (not by the code under test)."""
    obj = json.loads(line)
    if signal == "logs":
        return sum(len(s.get("logRecords", [])) for r in obj["resourceLogs"] for s in r["scopeLogs"])
    if signal == "traces":
        return sum(len(s.get("spans", [])) for r in obj["resourceSpans"] for s in r["scopeSpans"])
    return sum(
        len(d.get("dataPoints", []))
        for r in obj["resourceMetrics"]
        for s in r["scopeMetrics"]
        for m in s["metrics"]
        for d in m.values()
        if isinstance(d, dict)
    )


def _reference(tmp_path: Path, line: bytes | str) -> dict:
    """What ``kvtrace ingest`` makes of the line as a file."""
    from kvtrace.ingest import ingest
    from kvtrace.store import Store

    f = tmp_path / "direct.jsonl"
    f.write_bytes((line.encode() if isinstance(line, str) else line) + b"\n")
    with Store(memory=True) as store:
        return ingest(store, [f], format="otlp-json").to_dict()


@pytest.mark.parametrize("media", [otlp.JSON_TYPE, otlp.PROTOBUF_TYPE], ids=["json", "protobuf"])
@pytest.mark.parametrize("case,signal,line,rejects", CASES, ids=[c[0] for c in CASES])
def test_the_collectors_ingest_rejects_what_ingest_rejects(tmp_path, case, signal, line, rejects, media):
    expected = _reference(tmp_path, line)
    # each case means what it says: ingest stores rows from it, and rejects something or nothing
    assert expected["requests_added"] + expected["metric_points_added"] > 0 or rejects, expected
    assert (expected["lines_rejected"] > 0) == rejects, expected["rejects"]
    body = orjson.dumps(orjson.loads(line)) if media == otlp.JSON_TYPE else as_protobuf(signal, line)
    spool = tmp_path / "spool"
    assert receive(spool, signal, media, body) == _records(signal, line)  # every record acknowledged
    got = worker.ingest_segments(str(spool), str(tmp_path / "kv.duckdb"), 3600, now=True)
    assert got["segments"] == 1 and got["failed"] == 0, got
    assert {k: got[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    assert reasons(got["rejects"]) == reasons(expected["rejects"])


def test_a_record_ingest_rejects_is_acknowledged_then_counted_by_the_collectors_ingest(tmp_path):
    """Over HTTP: the answer is a plain success (the record is stored), and the ingest cycle counts
    the reject in ``kvtrace_collect_rejected_records_total``; the good record is in the warehouse."""
    import time

    from kvtrace.store import Store

    body = logs_line(event(request_id="req_good"), event(request_id="req_bad", output_tokens="lots")).encode()
    db = tmp_path / "kv.duckdb"
    with running_collector(tmp_path, db=db, ingest_every=0.3) as c:
        st, _, answer = post(c.http_port, "/v1/logs", body, {"content-type": "application/json"})
        assert (st, answer) == (200, b"{}")
        assert c.metrics.get("kvtrace_collect_stored_records_total", signal="logs") == 2
        deadline = time.monotonic() + 60
        while c.metrics.get("kvtrace_collect_segments_ingested_total") < 1:
            assert time.monotonic() < deadline, "no ingest happened"
            time.sleep(0.1)
        assert c.metrics.get("kvtrace_collect_rejected_records_total") == 1
    with Store(db, read_only=True) as store:
        assert store.query("SELECT request_id FROM requests") == [("req_good",)]
