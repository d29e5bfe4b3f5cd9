"""OTLP wire handling shared by the HTTP and gRPC front ends: bodies in, spool frames out.

A request body is decompressed under a cap, decoded (``application/json`` with ``orjson``,
``application/x-protobuf`` with ``opentelemetry-proto``), checked cheaply, and turned into one
spool frame. JSON bodies are stored as one compact OTLP JSON line. Protobuf bodies are stored as
the validated protobuf bytes and converted to OTLP JSON when their segment is sealed
(:mod:`kvtrace.collect.pbjson`), which keeps the slow per-attribute Python work off the
acknowledgement path.

The one check done per record (:mod:`kvtrace.collect.validate`) finds the records ingest would
reject (an ``api_request`` event or ``llm_request`` span whose token count is not a count or that
has no time, a ``token.usage`` point without a count, time or type). Such records are dropped
from the stored batch and reported back as an OTLP partial success.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from importlib import import_module

import orjson

from kvtrace.collect.fastjson import fast_count
from kvtrace.collect.validate import (TOKEN_METRIC, has_start_json, has_time_json, json_point_problem,
                                      json_record_problem, json_span_problem, pb_point_problem, pb_record_problem,
                                      pb_ns_present, pb_span_problem, reject_message, tokens_clean_json, tokens_clean_pb)


# What each signal looks like on the wire (OTLP JSON keys; protobuf classes by module).
@dataclass(frozen=True)
class Signal:
    name: str                # logs | metrics | traces
    frame_kind: int          # spool frame kind for protobuf bodies
    resource_key: str        # resourceLogs ...
    scope_key: str           # scopeLogs ...
    items_key: str           # logRecords | metrics | spans
    rejected_key: str        # partialSuccess field
    module: str              # opentelemetry.proto.collector.<x>.v1.<x>_service_pb2
    request: str
    response: str
    grpc_service: str

    def pb(self, name: str):
        return getattr(import_module(self.module), name)


SIGNALS: dict[str, Signal] = {s.name: s for s in [
    Signal("logs", ord("L"), "resourceLogs", "scopeLogs", "logRecords", "rejectedLogRecords",
           "opentelemetry.proto.collector.logs.v1.logs_service_pb2", "ExportLogsServiceRequest",
           "ExportLogsServiceResponse", "opentelemetry.proto.collector.logs.v1.LogsService"),
    Signal("metrics", ord("M"), "resourceMetrics", "scopeMetrics", "metrics", "rejectedDataPoints",
           "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", "ExportMetricsServiceRequest",
           "ExportMetricsServiceResponse", "opentelemetry.proto.collector.metrics.v1.MetricsService"),
    Signal("traces", ord("T"), "resourceSpans", "scopeSpans", "spans", "rejectedSpans",
           "opentelemetry.proto.collector.trace.v1.trace_service_pb2", "ExportTraceServiceRequest",
           "ExportTraceServiceResponse", "opentelemetry.proto.collector.trace.v1.TraceService"),
]}
JSON_FRAME = ord("J")
SIGNAL_BY_FRAME = {s.frame_kind: s for s in SIGNALS.values()}

JSON_TYPE = "application/json"
PROTOBUF_TYPE = "application/x-protobuf"
MEDIA_TYPES = (JSON_TYPE, PROTOBUF_TYPE)

_METRIC_DATA = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


class BadPayload(ValueError):
    """A body that cannot be decoded (answered with 400 / INVALID_ARGUMENT, never retried)."""


class TooLarge(ValueError):
    """A body over the size limit, before or after decompression (413 / RESOURCE_EXHAUSTED)."""


class UnsupportedEncoding(ValueError):
    """A Content-Encoding other than gzip, deflate or identity (415)."""


@dataclass
class Batch:
    """One decoded export request, ready to append to the spool."""

    signal: Signal
    frame_kind: int
    payload: bytes           # the frame body: an OTLP JSON line, or protobuf bytes
    records: int             # records kept (log records, data points, spans)
    rejected: int = 0
    message: str | None = None


# -- decompression ---------------------------------------------------------------------------

def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """Undo ``Content-Encoding`` without ever holding more than ``limit`` bytes of output.

    Raises:
        TooLarge: the decompressed body would exceed ``limit`` (a gzip bomb stops here).
        BadPayload: corrupt compressed data.
        UnsupportedEncoding: an encoding other than gzip, deflate or identity.
    """
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        if len(body) > limit:
            raise TooLarge(f"body of {len(body)} bytes is over the {limit}-byte limit")
        return body
    if enc in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif enc == "deflate":
        # HTTP "deflate" is the zlib format, but some clients send raw deflate: look at the header.
        zlib_header = len(body) >= 2 and (body[0] & 0x0F) == 8 and ((body[0] << 8) | body[1]) % 31 == 0
        wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
    else:
        raise UnsupportedEncoding(f"unsupported Content-Encoding '{encoding}'; use gzip, deflate or none")
    out = bytearray()
    data = body
    try:
        while data:
            d = zlib.decompressobj(wbits)
            chunk = d.decompress(data, limit + 1 - len(out))
            out += chunk
            while d.unconsumed_tail and len(out) <= limit:
                out += d.decompress(d.unconsumed_tail, limit + 1 - len(out))
            if len(out) > limit:
                raise TooLarge(f"body is over the {limit}-byte limit after decompression")
            if not d.eof:
                raise BadPayload(f"truncated {enc} body")
            data = d.unused_data if enc != "deflate" else b""   # gzip may have several members
            if data and not data.strip(b"\x00"):
                break
    except zlib.error as e:
        raise BadPayload(f"corrupt {enc} body: {e}") from None
    return bytes(out)


# -- JSON ------------------------------------------------------------------------------------

def _list(node: object, where: str) -> list:
    if node is None:
        return []
    if not isinstance(node, list):
        raise BadPayload(f"field '{where}' must be an array")
    return node


def _dict(node: object, where: str) -> dict:
    if not isinstance(node, dict):
        raise BadPayload(f"field '{where}' must be an object")
    return node


def _keep(items: list, problem_of) -> tuple[list, int, str | None]:
    """Split items into those ingest can store and a count (and first reason) of the others."""
    kept, first = [], None
    for item in items:
        problem = problem_of(item)
        if problem is None:
            kept.append(item)
        else:
            first = first or problem
    return kept, len(items) - len(kept), first


def _json_records(signal: Signal, scope: dict, items: list, clean: bool) -> tuple[int, int, str | None]:
    for rec in items:
        _list(_dict(rec, f"{signal.items_key}[]").get("attributes"), f"{signal.items_key}[].attributes")
    if signal.name == "logs":
        check = lambda r: None if clean and has_time_json(r) else json_record_problem(r)  # noqa: E731
    else:
        check = lambda r: None if clean and has_start_json(r) else json_span_problem(r)  # noqa: E731
    kept, bad, first = _keep(items, check)
    if bad:
        scope[signal.items_key] = kept
    return len(kept), bad, first


def _json_metrics(signal: Signal, scope: dict, items: list, clean: bool) -> tuple[int, int, str | None]:
    records = rejected = 0
    first = None
    for m in items:
        m = _dict(m, "metrics[]")
        for k in _METRIC_DATA:
            if k not in m:
                continue
            points = _list(_dict(m[k], k).get("dataPoints"), f"{k}.dataPoints")
            if k == "sum" and m.get("name") == TOKEN_METRIC:
                temporality = m[k].get("aggregationTemporality")
                kept, bad, problem = _keep(points, lambda p: json_point_problem(temporality, p))
                if bad:
                    m[k]["dataPoints"] = points = kept
                    rejected, first = rejected + bad, first or problem
            records += len(points)
    return records, rejected, first


def decode_json(signal: Signal, body: bytes) -> Batch:
    """Validate an OTLP JSON export request and make its spool line.

    Raises:
        BadPayload: not JSON, or not shaped like the signal's export request.
    """
    n = fast_count(signal.name, body)
    if n is not None:   # proved clean without building the object tree: store the body as sent
        return Batch(signal, JSON_FRAME, body.strip() if n else b"", n)
    return decode_json_exact(signal, body)


def decode_json_exact(signal: Signal, body: bytes) -> Batch:
    """:func:`decode_json` without the fast path: parse everything, check every record."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadPayload(f"body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadPayload("body must be a JSON object (an OTLP export request)")
    snake = signal.resource_key.replace("resource", "resource_").lower()
    if signal.resource_key not in obj and snake in obj:
        raise BadPayload(f"'{snake}' is not OTLP JSON; keys are lowerCamelCase ('{signal.resource_key}')")
    resources = _list(obj.get(signal.resource_key), signal.resource_key)
    records = rejected = 0
    first_problem = None
    clean = signal.name != "metrics" and tokens_clean_json(body)
    for i, res in enumerate(resources):
        res = _dict(res, f"{signal.resource_key}[{i}]")
        for j, scope in enumerate(_list(res.get(signal.scope_key), f"{signal.resource_key}[{i}].{signal.scope_key}")):
            scope = _dict(scope, f"{signal.scope_key}[{j}]")
            items = _list(scope.get(signal.items_key), f"{signal.scope_key}[{j}].{signal.items_key}")
            n, bad, problem = (_json_metrics if signal.name == "metrics" else _json_records)(signal, scope, items, clean)
            records, rejected = records + n, rejected + bad
            first_problem = first_problem or problem
    if records == 0:
        line = b""
    elif rejected or len(obj) != 1 or b"\n" in body or b"\r" in body:
        line = orjson.dumps({signal.resource_key: resources})
    else:
        line = body.strip()
    return Batch(signal, JSON_FRAME, line, records, rejected, reject_message(rejected, first_problem))


# -- protobuf --------------------------------------------------------------------------------

def decode_protobuf(signal: Signal, body: bytes) -> Batch:
    """Validate a protobuf export request; the frame keeps its bytes (re-encoded only if records were dropped).

    Raises:
        BadPayload: the bytes are not the signal's export request.
    """
    from google.protobuf.message import DecodeError

    try:
        msg = signal.pb(signal.request).FromString(body)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise BadPayload(f"body is not a protobuf {signal.request}: {e}") from None
    records = rejected = 0
    first_problem = None
    clean = signal.name != "metrics" and tokens_clean_pb(body)
    if signal.name == "logs":
        for rl in msg.resource_logs:
            for sl in rl.scope_logs:
                bad = []
                for i, rec in enumerate(sl.log_records):
                    if clean and (pb_ns_present(rec.time_unix_nano) or pb_ns_present(rec.observed_time_unix_nano)):
                        continue
                    problem = pb_record_problem(rec)
                    if problem is not None:
                        bad.append(i)
                        first_problem = first_problem or problem
                for i in reversed(bad):
                    del sl.log_records[i]
                rejected += len(bad)
                records += len(sl.log_records)
    elif signal.name == "metrics":
        for rm in msg.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    if not kind:
                        continue
                    points = getattr(m, kind).data_points
                    if kind == "sum" and m.name == TOKEN_METRIC:
                        temporality = m.sum.aggregation_temporality
                        bad = [i for i, p in enumerate(points) if pb_point_problem(temporality, p)]
                        if bad:
                            first_problem = first_problem or pb_point_problem(temporality, points[bad[0]])
                        for i in reversed(bad):
                            del points[i]
                        rejected += len(bad)
                    records += len(points)
    else:
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                bad = [i for i, span in enumerate(ss.spans)
                       if not (clean and pb_ns_present(span.start_time_unix_nano)) and pb_span_problem(span)]
                if bad:
                    first_problem = first_problem or pb_span_problem(ss.spans[bad[0]])
                for i in reversed(bad):
                    del ss.spans[i]
                rejected += len(bad)
                records += len(ss.spans)
    payload = b"" if records == 0 else msg.SerializeToString() if rejected else body
    return Batch(signal, signal.frame_kind, payload, records, rejected, reject_message(rejected, first_problem))


def decode(signal: Signal, media_type: str, body: bytes) -> Batch:
    """Decode a (decompressed) body of ``media_type`` (``application/json`` or ``application/x-protobuf``)."""
    return decode_json(signal, body) if media_type == JSON_TYPE else decode_protobuf(signal, body)


# -- answers ---------------------------------------------------------------------------------

def media_type_of(content_type: str | None) -> str | None:
    """The OTLP media type named by a Content-Type header, or None if it is not one."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    return base if base in MEDIA_TYPES else None


def success_body(signal: Signal, media_type: str, rejected: int = 0, message: str | None = None) -> bytes:
    """An ``Export*ServiceResponse``: empty, or with a partial success."""
    if media_type == JSON_TYPE:
        if not rejected:
            return b"{}"
        return orjson.dumps({"partialSuccess": {signal.rejected_key: str(rejected), "errorMessage": message or ""}})
    return response_message(signal, rejected, message).SerializeToString()


def response_message(signal: Signal, rejected: int = 0, message: str | None = None):
    """The protobuf ``Export*ServiceResponse`` (gRPC answers and protobuf HTTP answers)."""
    resp = signal.pb(signal.response)()
    if rejected:
        field = {"logs": "rejected_log_records", "metrics": "rejected_data_points", "traces": "rejected_spans"}
        setattr(resp.partial_success, field[signal.name], rejected)
        resp.partial_success.error_message = message or ""
    return resp


# google.rpc.Code values used in Status bodies.
GRPC_CODES = {400: 3, 401: 16, 404: 5, 405: 12, 413: 8, 415: 3, 429: 8, 503: 14, 500: 13}


def status_body(http_status: int, message: str, media_type: str | None) -> tuple[bytes, str]:
    """A ``google.rpc.Status`` error body in the request's media type (JSON when unknown)."""
    code = GRPC_CODES.get(http_status, 2)
    if media_type == PROTOBUF_TYPE:
        from google.rpc import status_pb2

        return status_pb2.Status(code=code, message=message).SerializeToString(), PROTOBUF_TYPE
    return orjson.dumps({"code": code, "message": message}), JSON_TYPE
