"""The collector's protocol contract over real loopback sockets: every HTTP status and gRPC code."""

from __future__ import annotations

import gzip
import threading
import time

import orjson
import pytest

from kvtrace.collect import otlp, segments
from kvtrace.collect.config import CollectorConfig
from kvtrace.errors import ConfigError
from tests.collect_support import (
    api_request_json,
    gzip_bomb,
    logs_request_json,
    logs_request_pb,
    post,
    running_collector,
)

JSON = {"content-type": "application/json"}
PB = {"content-type": "application/x-protobuf"}
LOGS_BODY = orjson.dumps(logs_request_json([api_request_json("req_1", (1, 2, 3, 4))]))


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    with running_collector(tmp_path_factory.mktemp("collect"), max_body=1 << 20) as c:
        yield c


def _status(body: bytes) -> dict:
    return orjson.loads(body)


def test_200_json_and_protobuf_answer_in_the_request_type(collector):
    st, h, body = post(collector.http_port, "/v1/logs", LOGS_BODY, JSON)
    assert (st, h["content-type"], body) == (200, "application/json", b"{}")
    pb = logs_request_pb([("req_2", (1, 1, 1, 1))]).SerializeToString()
    st, h, body = post(collector.http_port, "/v1/logs", pb, PB)
    assert (st, h["content-type"]) == (200, "application/x-protobuf")
    resp = otlp.SIGNALS["logs"].pb("ExportLogsServiceResponse").FromString(body)
    assert not resp.HasField("partial_success")
    st, _, body = post(collector.http_port, "/v1/logs", gzip.compress(pb), {**PB, "content-encoding": "gzip"})
    assert st == 200
    for path, key in (("/v1/metrics", "resourceMetrics"), ("/v1/traces", "resourceSpans")):
        st, _, body = post(collector.http_port, path, orjson.dumps({key: []}), JSON)
        assert (st, body) == (200, b"{}")


def test_200_for_records_ingest_will_reject(collector):
    """The receiver judges the request, not its records: a record whose count is not a count is
    stored and acknowledged like the rest; the ingest of its segment rejects it (test_collect_rejects)."""
    recs = [api_request_json("req_ok", (1, 2, 3, 4)), api_request_json("req_bad", (1, 2, 3, 4))]
    recs[1]["attributes"][-4]["value"] = {"stringValue": "NaN tokens"}
    before = _counter(collector, 'kvtrace_collect_stored_records_total{signal="logs"}')
    st, _, body = post(collector.http_port, "/v1/logs", orjson.dumps(logs_request_json(recs)), JSON)
    assert (st, body) == (200, b"{}")
    pb = logs_request_pb([("a", (1, 1, 1, 1)), ("b", (1, 1, 1, 1))], bad={"a", "b"}).SerializeToString()
    st, _, body = post(collector.http_port, "/v1/logs", pb, PB)
    resp = otlp.SIGNALS["logs"].pb("ExportLogsServiceResponse").FromString(body)
    assert st == 200 and not resp.HasField("partial_success")
    assert _counter(collector, 'kvtrace_collect_stored_records_total{signal="logs"}') == before + 4


def test_400_with_status_body(collector):
    st, h, body = post(collector.http_port, "/v1/logs", b"{not json", JSON)
    assert st == 400 and h["content-type"] == "application/json"
    assert _status(body)["code"] == 3 and "not JSON" in _status(body)["message"]
    st, h, body = post(collector.http_port, "/v1/metrics", b"\x0a\xff\xff\xff\xff\x0f", PB)
    from google.rpc import status_pb2

    assert st == 400 and h["content-type"] == "application/x-protobuf"
    assert status_pb2.Status.FromString(body).code == 3
    st, _, _ = post(collector.http_port, "/v1/logs", b"garbage", {**JSON, "content-encoding": "gzip"})
    assert st == 400


def test_404_and_405(collector):
    st, _, body = post(collector.http_port, "/v1/profiles", LOGS_BODY, JSON)
    assert st == 404 and _status(body)["code"] == 5
    st, _, _ = post(collector.http_port, "/nope", b"", {})
    assert st == 404
    for method in ("GET", "PUT", "DELETE"):
        st, h, body = post(collector.http_port, "/v1/logs", b"", JSON, method=method)
        assert st == 405 and h.get("allow") == "POST", method
        assert "POST" in _status(body)["message"]


def test_413_on_the_wire_and_after_decompression(collector):
    big = b"x" * ((1 << 20) + 1)
    st, _, body = post(collector.http_port, "/v1/logs", big, JSON)
    assert st == 413 and "limit" in _status(body)["message"]
    st, _, _ = post(collector.http_port, "/v1/logs", gzip_bomb(64 << 20), {**JSON, "content-encoding": "gzip"})
    assert st == 413


def test_413_for_a_chunked_body_without_length(collector):
    def chunks():
        for _ in range(40):
            yield b"y" * 65536

    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    try:
        conn.request("POST", "/v1/logs", body=chunks(), headers=JSON, encode_chunked=True)
        assert conn.getresponse().status == 413
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before the client has sent every chunk; the answer was 413
    finally:
        conn.close()


def test_415(collector):
    st, _, body = post(collector.http_port, "/v1/logs", LOGS_BODY, {"content-type": "text/plain"})
    assert st == 415 and "application/x-protobuf" in _status(body)["message"]
    st, _, _ = post(collector.http_port, "/v1/logs", LOGS_BODY, {})
    assert st == 415
    st, _, _ = post(collector.http_port, "/v1/logs", LOGS_BODY, {**JSON, "content-encoding": "br"})
    assert st == 415
    st, _, _ = post(collector.http_port, "/v1/logs", LOGS_BODY, {"content-type": "application/json; charset=utf-8"})
    assert st == 200


def test_healthz_and_metrics(collector):
    st, _, body = post(collector.http_port, "/healthz", b"", method="GET")
    assert st == 200 and _status(body)["status"] == "ok"
    before = _counter(collector, 'kvtrace_collect_stored_records_total{signal="logs"}')
    assert post(collector.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 200
    st, h, body = post(collector.http_port, "/metrics", b"", method="GET")
    assert st == 200 and h["content-type"].startswith("text/plain")
    text = body.decode()
    for name in (
        "received_records_total",
        "stored_records_total",
        "rejected_records_total",
        "spool_bytes",
        "last_ingest_timestamp_seconds",
    ):
        assert f"kvtrace_collect_{name}" in text
    assert _counter(collector, 'kvtrace_collect_stored_records_total{signal="logs"}') == before + 1


def _counter(collector, series: str) -> float:
    body = post(collector.http_port, "/metrics", b"", method="GET")[2].decode()
    for line in body.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def test_401_with_a_token(tmp_path):
    with running_collector(tmp_path, token="s3cret") as c:
        assert post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 401
        st, h, _ = post(c.http_port, "/v1/logs", LOGS_BODY, {**JSON, "authorization": "Bearer wrong"})
        assert st == 401 and h["www-authenticate"] == "Bearer"
        assert post(c.http_port, "/v1/logs", LOGS_BODY, {**JSON, "authorization": "Bearer s3cret"})[0] == 200
        assert post(c.http_port, "/metrics", b"", method="GET")[0] == 401
        assert post(c.http_port, "/healthz", b"", method="GET")[0] == 200


def test_non_loopback_bind_needs_a_token():
    with pytest.raises(ConfigError, match="token"):
        CollectorConfig(host="0.0.0.0").check()
    CollectorConfig(host="0.0.0.0", token="t").check()
    CollectorConfig(host="0.0.0.0", insecure=True).check()
    CollectorConfig(host="::1").check()
    CollectorConfig(host="localhost").check()


def test_429_when_the_queue_is_over_its_bound(tmp_path):
    with running_collector(tmp_path, max_queue=1) as c:
        results = []
        with c.spool._io:  # hold the writer mid-flight so batches pile up in the queue
            t1 = threading.Thread(target=lambda: results.append(post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0]))
            t1.start()
            _wait(lambda: c.spool._queued_bytes == 0 and c.metrics.get("kvtrace_collect_received_records_total") >= 1)
            time.sleep(0.05)
            t2 = threading.Thread(target=lambda: results.append(post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0]))
            t2.start()
            _wait(lambda: c.spool._queued_bytes > 0)
            st, h, body = post(c.http_port, "/v1/logs", LOGS_BODY, JSON)
            assert st == 429 and h["retry-after"] == "1" and _status(body)["code"] == 8
        t1.join()
        t2.join()
        assert results == [200, 200]


def test_503_when_the_spool_is_over_its_bound(tmp_path):
    with running_collector(tmp_path, max_spool=10) as c:
        assert post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 200
        st, h, body = post(c.http_port, "/v1/logs", LOGS_BODY, JSON)
        assert st == 503 and int(h["retry-after"]) > 0 and _status(body)["code"] == 14


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# -- gRPC ------------------------------------------------------------------------------------


def _grpc_export(port, body: bytes, *, metadata=(), compression=None):
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 256 << 20)]) as ch:
        call = ch.unary_unary(
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            request_serializer=None,
            response_deserializer=otlp.SIGNALS["logs"].pb("ExportLogsServiceResponse").FromString,
        )
        return call(body, metadata=metadata, compression=compression, timeout=30)


def test_grpc_codes(tmp_path):
    import grpc

    with running_collector(tmp_path, max_body=1 << 20, token="tok") as c:
        auth = (("authorization", "Bearer tok"),)
        pb = logs_request_pb([("g1", (1, 2, 3, 4)), ("g2", (1, 2, 3, 4))], bad={"g2"}).SerializeToString()
        resp = _grpc_export(c.grpc_port, pb, metadata=auth, compression=grpc.Compression.Gzip)
        assert not resp.HasField("partial_success")  # g2 is stored; ingest rejects it
        cases = [
            (dict(body=pb), grpc.StatusCode.UNAUTHENTICATED),
            (dict(body=b"\x0a\xff\xff\xff\xff\x0f", metadata=auth), grpc.StatusCode.INVALID_ARGUMENT),
            (dict(body=b"\x0a" + b"\x00" * (2 << 20), metadata=auth), grpc.StatusCode.RESOURCE_EXHAUSTED),
            # a gzip bomb: small on the wire, over the limit once inflated
            (
                dict(body=bytes(8 << 20), metadata=auth, compression=grpc.Compression.Gzip),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            ),
        ]
        for kwargs, code in cases:
            with pytest.raises(grpc.RpcError) as e:
                _grpc_export(c.grpc_port, **kwargs)
            assert e.value.code() == code, kwargs.get("compression")
    with running_collector(tmp_path / "full", max_spool=10) as c:
        _grpc_export(c.grpc_port, pb)
        with pytest.raises(grpc.RpcError) as e:
            _grpc_export(c.grpc_port, pb)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        details = dict(e.value.trailing_metadata()).get("grpc-status-details-bin")
        assert details, "a RetryInfo tells the client when to retry"


def test_grpc_closes_connections_that_never_handshake(tmp_path):
    """Idle sockets on the gRPC port are closed after the header deadline, and an exporter is
    served meanwhile."""
    import socket

    with running_collector(tmp_path, header_timeout=1.0) as c:
        idle = [socket.create_connection(("127.0.0.1", c.grpc_port), timeout=10) for _ in range(50)]
        try:
            pb = logs_request_pb([("g1", (1, 2, 3, 4))]).SerializeToString()
            assert _grpc_export(c.grpc_port, pb).partial_success.rejected_log_records == 0
            deadline = time.monotonic() + 8
            closed = 0
            for s in idle:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    while s.recv(4096):  # the server's preface and settings, then end of stream
                        pass
                    closed += 1
                except socket.timeout:
                    pass  # still open: counted as not closed
                except ConnectionResetError:
                    closed += 1
            assert closed == len(idle)
        finally:
            for s in idle:
                s.close()


def test_ports_in_use_are_config_errors(tmp_path):
    with running_collector(tmp_path / "a") as c:
        with pytest.raises(ConfigError, match="cannot listen"):
            with running_collector(tmp_path / "b", grpc_port=c.grpc_port):
                pass
        with pytest.raises(ConfigError, match="cannot listen"):
            with running_collector(tmp_path / "c", http_port=c.http_port):
                pass
        assert post(c.http_port, "/healthz", b"", method="GET")[0] == 200


def test_spool_is_exclusive(tmp_path):
    with running_collector(tmp_path) as c:
        with pytest.raises(ConfigError, match="in use"):
            with running_collector(tmp_path):
                pass
        assert post(c.http_port, "/healthz", b"", method="GET")[0] == 200


def test_stop_flushes_and_seals(tmp_path):
    with running_collector(tmp_path) as c:
        assert post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 200
        spool = c.config.spool
    assert not segments.listing(spool, segments.OPEN) and not segments.listing(spool, segments.SEALED)
    ready = segments.listing(spool, segments.READY)
    assert len(ready) == 1 and orjson.loads(ready[0].read_bytes().splitlines()[0]) == orjson.loads(LOGS_BODY)


# -- idle and slow connections, the connection cap, quiet logs -------------------------------------


def _answer(sock, timeout: float = 5.0) -> bytes:
    """What the server writes before it closes the connection (within ``timeout``)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except OSError:
        return data or b"(no answer)"
    return data


def test_idle_and_slow_connections_are_cut_and_over_the_limit_refused(tmp_path, caplog):
    import logging
    import socket

    caplog.set_level(logging.INFO, logger="kvtrace.collect")
    with running_collector(tmp_path, header_timeout=1.0, body_timeout=1.0, max_connections=20) as c:
        t0 = time.monotonic()
        idle = [socket.create_connection(("127.0.0.1", c.http_port)) for _ in range(40)]
        try:
            answers = [_answer(s) for s in idle]
        finally:
            for s in idle:
                s.close()
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
        assert (len(refused), len(timed_out)) == (20, 20), answers
        assert b"Retry-After: 1" in refused[0] and b"too many connections" in refused[0]
        assert time.monotonic() - t0 < 4.5  # nobody waited for more than the deadline
        # headers that never finish, and a body that never finishes
        with socket.create_connection(("127.0.0.1", c.http_port)) as s:
            s.sendall(b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            assert _answer(s).startswith(b"HTTP/1.1 408")
        with socket.create_connection(("127.0.0.1", c.http_port)) as s:
            s.sendall(
                b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"resourceLogs"'
            )
            a = _answer(s)
            assert a.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in a, a
        # and everyone else gets through
        assert post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 200
    refusals = [r for r in caplog.records if r.getMessage().startswith("refused a connection")]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]  # 20 refusals, one log line


def test_the_connection_cap_stays_under_the_open_file_limit():
    import resource

    from kvtrace.collect.guard import ACCEPT_BURST, RESERVED_FILES, connection_budget

    budget = connection_budget(10**9)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert budget == soft - RESERVED_FILES - ACCEPT_BURST if soft != resource.RLIM_INFINITY else budget == 10**9
    assert connection_budget(50) == 50


def test_spool_files_are_private_whatever_the_umask(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    import os
    import stat

    old = os.umask(0o022)
    try:
        with running_collector(tmp_path / "a") as c:  # spool only: .jsonl stays
            assert post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 200
        with running_collector(tmp_path / "b", db=tmp_path / "kv.duckdb", ingest_every=3600) as c:
            assert post(c.http_port, "/v1/logs", LOGS_BODY, JSON)[0] == 200
    finally:
        os.umask(old)
    files = [
        *segments.listing(tmp_path / "a" / "spool", segments.READY),
        *(tmp_path / "b" / "spool" / segments.INGESTED_DIR).glob("*" + segments.DONE),
    ]
    assert len(files) == 2
    for p in files + [tmp_path / "a" / "spool", tmp_path / "b" / "spool" / segments.INGESTED_DIR]:
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, (p, oct(p.stat().st_mode))


def test_the_access_log_redacts_query_values_and_a_dropped_client_is_one_line(tmp_path, caplog):
    import logging
    import socket

    caplog.set_level(logging.INFO)
    with running_collector(tmp_path, access_log=True) as c:
        assert post(c.http_port, "/v1/logs?token=s3cr3t-value&x=1", LOGS_BODY, JSON)[0] == 200
        for _ in range(3):  # clients that go away mid-body
            with socket.create_connection(("127.0.0.1", c.http_port)) as s:
                s.sendall(
                    b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b'Content-Length: 1000\r\n\r\n{"resourceLogs"'
                )
                time.sleep(0.2)
        time.sleep(0.3)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "/v1/logs?token=REDACTED&x=REDACTED" in text and "s3cr3t" not in text, text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    gone = [r for r in caplog.records if "went away" in r.getMessage()]
    assert 1 <= len(gone) <= 3 and all("\n" not in r.getMessage() for r in gone)
