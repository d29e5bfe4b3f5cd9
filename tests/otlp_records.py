"""Builders of OTLP JSON lines as Claude Code and the OpenTelemetry Collector write them (no tests
here): ``event`` (a log record such as ``api_request``) and ``logs_line``, ``point`` and
``metrics_line`` (``claude_code.token.usage``), ``span`` and ``spans_line`` (``llm_request``), and
``lines``, which joins lines into file bytes. ``av``/``kvs`` encode attributes in each wire style
(JSON numbers, int64 as strings, all strings, doubles); ``T0``, ``COUNTS`` and ``RESOURCE`` are the
defaults every record carries."""

from __future__ import annotations

import json

T0 = 1_795_953_115_943_000_000  # ns
COUNTS = {"input_tokens": 113, "output_tokens": 127, "cache_read_tokens": 21000, "cache_creation_tokens": 417}


def av(v, wire: str = "js") -> dict:
    """An AnyValue; ``wire`` picks the encoding of numbers: js (JSON number), collector (int64 as
    a string), string (every attribute a stringValue, CC < 2.1.122), double (doubleValue)."""
    if isinstance(v, dict):
        return v  # already an AnyValue
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if wire == "string":
        return {"stringValue": str(v)}
    if isinstance(v, float) or wire == "double":
        return {"doubleValue": float(v)}
    return {"intValue": v if wire == "js" else str(v)}


def kvs(d: dict, wire: str = "js") -> list[dict]:
    return [{"key": k, "value": av(v, wire)} for k, v in d.items() if v is not None]


RESOURCE = {"service.name": "claude-code", "service.version": "2.1.197", "os.type": "linux", "host.arch": "amd64"}


def event(name: str = "api_request", *, wire: str = "js", time_ns=T0, observed_ns=None, **attrs) -> dict:
    base = {
        "user.id": "u-hash",
        "session.id": "s1",
        "terminal.type": "non-interactive",
        "event.name": name,
        "event.timestamp": "2026-11-29T11:51:55.943Z",
        "event.sequence": 2,
        "prompt.id": "p1",
    }
    if name == "api_request":
        base |= {
            "model": "claude-opus-4-8",
            **COUNTS,
            "cost_usd": 0.01684625,
            "duration_ms": 36,
            "request_id": "req_1",
            "query_source": "sdk",
        }
    rec = {"body": {"stringValue": f"claude_code.{name}"}, "attributes": kvs(base | attrs, wire)}
    if time_ns is not None:
        rec["timeUnixNano"] = str(time_ns)
    if observed_ns is not None:
        rec["observedTimeUnixNano"] = str(observed_ns)
    return rec


def logs_line(*records, resource=RESOURCE) -> str:
    return json.dumps(
        {
            "resourceLogs": [
                {
                    "resource": {"attributes": kvs(resource)},
                    "scopeLogs": [{"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": list(records)}],
                }
            ]
        }
    )


def point(token_type: str, value, start_ns: int, end_ns: int, *, session="s1", value_key="asDouble", **attrs) -> dict:
    a = {
        "user.id": "u-hash",
        "session.id": session,
        "model": "claude-opus-4-8",
        "query_source": "main",
        "type": token_type,
        **attrs,
    }
    return {"attributes": kvs(a), "startTimeUnixNano": str(start_ns), "timeUnixNano": str(end_ns), value_key: value}


def metrics_line(*points, temporality=1, name="claude_code.token.usage") -> str:
    s = {"isMonotonic": True, "dataPoints": list(points)}
    if temporality is not None:
        s["aggregationTemporality"] = temporality
    return json.dumps(
        {
            "resourceMetrics": [
                {
                    "resource": {"attributes": kvs(RESOURCE)},
                    "scopeMetrics": [
                        {
                            "scope": {"name": "com.anthropic.claude_code"},
                            "metrics": [{"name": name, "unit": "tokens", "sum": s}],
                        }
                    ],
                }
            ]
        }
    )


def span(name="claude_code.llm_request", *, start_ns=T0 - 40_000_000, end_ns=T0, **attrs) -> dict:
    a = {
        "session.id": "s1",
        "user.id": "u-hash",
        "span.type": "llm_request",
        "model": "claude-opus-4-8[1m]",
        "gen_ai.request.model": "claude-opus-4-8[1m]",
        **COUNTS,
        "request_id": "req_1",
        "ttft_ms": 14,
        "duration_ms": 41,
    } | attrs
    return {
        "traceId": "efed979384993c475b3ccea96ca0e6f1",
        "spanId": "0dd57ea632ef143e",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(end_ns),
        "attributes": kvs(a),
    }


def spans_line(*spans) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": kvs(RESOURCE)},
                    "scopeSpans": [{"scope": {"name": "com.anthropic.claude_code.tracing"}, "spans": list(spans)}],
                }
            ]
        }
    )


def lines(*ls) -> bytes:
    return "".join(x + "\n" for x in ls).encode()
