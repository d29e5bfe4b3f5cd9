"""Fuzz the collector over HTTP: 10,000 random and mutated payloads, seeded (reproducible).

Every answer must be a contract status (200, 400, 404, 405, 413, 415, or an overload 503): never
a 500, a hang or a crash. Afterwards the collector is still healthy, and everything it stored
converts to OTLP JSON lines that ingest reads as export requests (it may reject their records).
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import re
import zlib

import orjson
import pytest

from kvtrace.collect import segments
from tests.collect_support import (
    Connection,
    api_request_json,
    logs_request_json,
    logs_request_pb,
    running_collector,
    sdk_payloads,
)

pytestmark = pytest.mark.slow  # end-to-end: real processes, servers or long runs (make test-all)

N_PAYLOADS = 10_000
ALLOWED = {200, 400, 404, 405, 413, 415, 503}
PATHS = ["/v1/logs"] * 6 + ["/v1/metrics"] * 2 + ["/v1/traces"] * 2 + ["/v1/x", "/v1/logs/"]
TYPES = (
    ["application/json"] * 5
    + ["application/x-protobuf"] * 5
    + ["application/json; charset=utf-8", "text/plain", "", "application/x-protobuf;proto=x", "\x00"]
)


def _seeds() -> list[bytes]:
    recs = [api_request_json(f"req_f{i}", (i, 2 * i, 3 * i, 4 * i), as_string=i % 2 == 0) for i in range(4)]
    out = [
        orjson.dumps(logs_request_json(recs)),
        orjson.dumps(
            {
                "resourceMetrics": [
                    {
                        "scopeMetrics": [
                            {
                                "metrics": [
                                    {
                                        "name": "claude_code.token.usage",
                                        "sum": {
                                            "aggregationTemporality": 1,
                                            "dataPoints": [{"asDouble": 3, "timeUnixNano": "1"}],
                                        },
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        ),
        orjson.dumps(
            {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "00" * 16, "spanId": "11" * 8, "name": "s"}]}]}]}
        ),
        logs_request_pb([("req_p1", (1, 2, 3, 4)), ("req_p2", (5, 6, 7, 8))]).SerializeToString(),
    ]
    out += list(sdk_payloads().values())
    return out


def _dumps(obj) -> bytes:
    """The stdlib encoder: it writes integers beyond 64 bits, which the receiver must refuse cleanly."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _random_json(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 3 or r < 0.4:
        return rng.choice(
            [
                None,
                True,
                False,
                rng.randint(-(2**70), 2**70),
                rng.random() * 1e300,
                "",
                "x" * rng.randint(0, 40),
                "claude_code.api_request",
                "api_request",
                "-1",
                "NaN",
                "1e999",
                {"stringValue": "many"},
            ]
        )
    if r < 0.7:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = [
        "resourceLogs",
        "scopeLogs",
        "logRecords",
        "attributes",
        "key",
        "value",
        "body",
        "stringValue",
        "intValue",
        "doubleValue",
        "timeUnixNano",
        "resourceMetrics",
        "scopeMetrics",
        "metrics",
        "sum",
        "dataPoints",
        "resourceSpans",
        "scopeSpans",
        "spans",
        "traceId",
        "eventName",
        "arrayValue",
    ]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _mutate_json_tree(rng: random.Random, body: bytes) -> bytes:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    node, steps = obj, rng.randint(1, 8)
    for _ in range(steps):  # walk to a random container and replace one of its children
        kids = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        if not kids:
            break
        k, v = rng.choice(kids)
        if isinstance(v, (dict, list)) and rng.random() < 0.7:
            node = v
            continue
        node[k] = _random_json(rng)
        break
    return _dumps(obj)


def _mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    body = bytearray(rng.choice(seeds))
    op = rng.randrange(9)
    if op == 0:
        for _ in range(rng.randint(1, 10)):
            if body:
                body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
    elif op == 1:
        del body[rng.randrange(len(body) + 1) :]
    elif op == 2:
        at = rng.randrange(len(body) + 1)
        body[at:at] = rng.randbytes(rng.randint(1, 64))
    elif op == 3 and body:
        a = rng.randrange(len(body))
        b = rng.randrange(a, len(body) + 1)
        body[b:b] = body[a:b] * rng.randint(1, 4)
    elif op == 4:
        other = rng.choice(seeds)
        body = body[: rng.randrange(len(body) + 1)] + other[rng.randrange(len(other) + 1) :]
    elif op in (5, 6):
        return _mutate_json_tree(rng, bytes(body))
    elif op == 7:
        return rng.randbytes(rng.randint(0, 2000))
    else:
        return _dumps(_random_json(rng))
    return bytes(body)


def _encode(rng: random.Random, body: bytes) -> tuple[bytes, str | None]:
    r = rng.random()
    if r < 0.70:
        return body, None
    if r < 0.85:
        z = gzip.compress(body)
        if rng.random() < 0.3:  # damage the compressed stream
            z = z[: rng.randrange(len(z) + 1)] + rng.randbytes(rng.randint(0, 8))
        return z, "gzip"
    if r < 0.93:
        return zlib.compress(body), "deflate"
    if r < 0.97:
        return body, "gzip"  # claims gzip, is not
    return body, rng.choice(["br", "zstd", "GZIP", " identity "])


def test_fuzz_ten_thousand_payloads(tmp_path):
    rng = random.Random(20260806)
    seeds = _seeds()
    statuses: dict[int, int] = {}
    resets = 0
    with running_collector(tmp_path, max_body=256 << 10, grpc_port=None) as c:
        conn = Connection(c.http_port)
        for i in range(N_PAYLOADS):
            body, enc = _encode(rng, _mutate(rng, seeds))
            headers = {"content-type": rng.choice(TYPES)} if rng.random() < 0.97 else {}
            if enc:
                headers["content-encoding"] = enc
            method = "POST" if rng.random() < 0.98 else rng.choice(["GET", "PUT", "PATCH"])
            path = rng.choice(PATHS)
            resp = None
            for _attempt in range(3):
                try:
                    conn.request(method, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    status, _ = resp.status, resp.read()
                    break
                except (http.client.HTTPException, ConnectionError):
                    # The server may answer 413 and close while a large upload is still being sent:
                    # the client then sees a reset instead of the answer. Reconnect and resend.
                    conn.close()
                    conn = Connection(c.http_port)
            if resp is None:
                resets += 1  # three resets in a row: counted, and bounded below
                continue
            if resp.getheader("connection", "").lower() == "close":
                conn.close()
                conn = Connection(c.http_port)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in ALLOWED, (i, status, method, path, headers, body[:200])
            if status == 503:
                assert resp.getheader("retry-after"), i
        conn.close()
        assert c.healthy()
        stored = c.metrics.get("kvtrace_collect_stored_records_total")
        spool = c.config.spool
    print("statuses", sorted(statuses.items()), "stored records", stored)
    assert sum(statuses.values()) + resets == N_PAYLOADS
    assert resets <= N_PAYLOADS // 1000, resets  # a rare client-side race, never a crash (healthy above)
    assert statuses.get(200, 0) > 500 and statuses.get(400, 0) > 500, statuses  # both paths were exercised
    assert stored > 0
    lines = [ln for p in segments.listing(spool, segments.READY) for ln in p.read_bytes().splitlines()]
    for ln in lines:
        orjson.loads(ln)
    from kvtrace.ingest import ingest
    from kvtrace.store import Store

    with Store(memory=True) as store:
        summary = ingest(store, [spool], format="otlp-json")
    assert summary.files >= 1
    # ingest reads every stored line as an export request: a reject, if any, names a field of a
    # record (mutated token counts and times are the ingest's to judge), never the line's shape
    line_rejects = [r for r in summary.rejects if not re.search(r":\d+: field '(?!resource)[^']+': ", r)]
    assert not line_rejects, line_rejects[:5]
