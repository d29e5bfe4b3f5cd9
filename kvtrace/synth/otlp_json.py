"""OTLP JSON lines from OpenTelemetry SDK objects, byte for byte as the Python file exporter writes them.

``opentelemetry-exporter-otlp-json-file`` (0.66b1) writes one compact line per ``export()``:
``json.dumps(encode(batch), separators=(",", ":"))`` where the encoder
(``opentelemetry-exporter-otlp-json-common``) groups records by resource then scope (first
appearance order), uses lowerCamelCase keys, writes int64 as decimal strings, enums as ints and
omits unset/zero fields. That package pins a different ``opentelemetry-exporter-otlp-common``
than the OTLP/HTTP exporter kvtrace installs, so its mapping is reproduced here:

* ``encode_logs`` / ``encode_metrics`` mirror the upstream encoders field by field (the
  reference, tested against the protobuf encoder of ``opentelemetry-exporter-otlp-proto-common``);
* ``logs_line`` / ``metrics_line`` build the same text directly with string templates, because
  the generator writes hundreds of thousands of records; tests check both give identical bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


# -- reference encoders (dicts) --------------------------------------------------------------
def _value(v: Any) -> dict:
    if v is None:
        return {}
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": _float(v)}
    if isinstance(v, bytes):
        import base64

        return {"bytesValue": base64.b64encode(v).decode()}
    if isinstance(v, Sequence):
        return {"arrayValue": {"values": [_value(x) for x in v]} if v else {}}
    if isinstance(v, Mapping):
        return {"kvlistValue": {"values": [_kv(str(k), x) for k, x in v.items()]} if v else {}}
    raise TypeError(f"cannot encode {type(v)}")


def _float(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _kv(k: str, v: Any) -> dict:
    d: dict = {}
    _put(d, "key", k)
    d["value"] = _value(v)
    return d


def _attrs(attributes: Mapping | None) -> list:
    return [_kv(k, v) for k, v in (attributes or {}).items()]


def _put(d: dict, key: str, value: Any) -> None:
    if value:
        d[key] = value


def _scope(scope: Any) -> dict:
    d: dict = {}
    if scope is not None:
        _put(d, "name", scope.name)
        _put(d, "version", scope.version)
        _put(d, "attributes", _attrs(scope.attributes))
    return d


def _resource(resource: Any) -> dict:
    d: dict = {}
    _put(d, "attributes", _attrs(resource.attributes))
    return d


def encode_logs(batch: Sequence[Any]) -> dict:
    """``ExportLogsServiceRequest`` dict of SDK ``ReadableLogRecord``s (reference mapping)."""
    groups: dict = {}
    for rec in batch:
        groups.setdefault(rec.resource, {}).setdefault(rec.instrumentation_scope or None, []).append(rec)
    out = []
    for resource, scopes in groups.items():
        scope_logs = []
        for scope, recs in scopes.items():
            sl: dict = {"scope": _scope(scope)}
            _put(sl, "logRecords", [_log_record(r) for r in recs])
            _put(sl, "schemaUrl", scope.schema_url if scope else None)
            scope_logs.append(sl)
        rl: dict = {"resource": _resource(resource)}
        _put(rl, "scopeLogs", scope_logs)
        _put(rl, "schemaUrl", resource.schema_url)
        out.append(rl)
    d: dict = {}
    _put(d, "resourceLogs", out)
    return d


def _log_record(rec: Any) -> dict:
    lr = rec.log_record
    d: dict = {}
    _put(d, "timeUnixNano", str(lr.timestamp) if lr.timestamp else None)
    _put(d, "observedTimeUnixNano", str(lr.observed_timestamp) if lr.observed_timestamp else None)
    _put(d, "severityNumber", getattr(lr.severity_number, "value", None))
    _put(d, "severityText", lr.severity_text)
    d["body"] = _value(lr.body)
    _put(d, "attributes", _attrs(lr.attributes))
    _put(d, "droppedAttributesCount", rec.dropped_attributes)
    _put(d, "flags", int(lr.trace_flags) if lr.trace_flags is not None else 0)
    _put(d, "traceId", lr.trace_id.to_bytes(16, "big").hex() if lr.trace_id else None)
    _put(d, "spanId", lr.span_id.to_bytes(8, "big").hex() if lr.span_id else None)
    _put(d, "eventName", lr.event_name)
    return d


def encode_metrics(data: Any) -> dict:
    """``ExportMetricsServiceRequest`` dict of an SDK ``MetricsData`` of Sum metrics (reference)."""
    rms = []
    for rm in data.resource_metrics:
        sms = []
        for sm in rm.scope_metrics:
            s: dict = {"scope": _scope(sm.scope)}
            _put(s, "metrics", [_metric(m) for m in sm.metrics])
            _put(s, "schemaUrl", sm.scope.schema_url)
            sms.append(s)
        r: dict = {"resource": _resource(rm.resource)}
        _put(r, "scopeMetrics", sms)
        _put(r, "schemaUrl", rm.resource.schema_url)
        rms.append(r)
    d: dict = {}
    _put(d, "resourceMetrics", rms)
    return d


def _metric(m: Any) -> dict:
    d: dict = {}
    _put(d, "name", m.name)
    _put(d, "description", m.description)
    _put(d, "unit", m.unit)
    pts = []
    for p in m.data.data_points:
        pd: dict = {}
        _put(pd, "attributes", _attrs(p.attributes))
        _put(pd, "startTimeUnixNano", str(p.start_time_unix_nano) if p.start_time_unix_nano else None)
        _put(pd, "timeUnixNano", str(p.time_unix_nano) if p.time_unix_nano else None)
        if isinstance(p.value, int):
            pd["asInt"] = str(p.value)
        else:
            pd["asDouble"] = _float(p.value)
        pts.append(pd)
    s: dict = {}
    _put(s, "dataPoints", pts)
    _put(s, "aggregationTemporality", int(m.data.aggregation_temporality))
    _put(s, "isMonotonic", m.data.is_monotonic)
    d["sum"] = s
    return d


def format_line(d: dict) -> str:
    """One file-exporter line."""
    return json.dumps(d, separators=(",", ":")) + "\n"


# -- fast path (same bytes) ------------------------------------------------------------------
_dumps = json.dumps


def _str(s: str) -> str:
    # Plain ASCII needs no escaping; anything else goes through json (identical output).
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'
    return _dumps(s)


def _fast_value(v: Any) -> str:
    t = type(v)
    if t is str:
        return '{"stringValue":' + _str(v) + "}"
    if t is int:
        return '{"intValue":"' + str(v) + '"}'
    if t is float and math.isfinite(v):
        return '{"doubleValue":' + repr(v) + "}"
    return _dumps(_value(v), separators=(",", ":"))


def _fast_attrs(attributes: Mapping) -> str:
    return ",".join('{"key":' + _str(k) + ',"value":' + _fast_value(v) + "}" for k, v in attributes.items())


class _Cache:
    """Encoded resource / scope prefixes, keyed by object identity (few distinct objects)."""

    def __init__(self) -> None:
        self.d: dict[int, tuple[Any, str]] = {}

    def get(self, obj: Any, make) -> str:
        hit = self.d.get(id(obj))
        if hit is None or hit[0] is not obj:
            hit = (obj, make(obj))
            self.d[id(obj)] = hit
        return hit[1]


_res_cache, _scope_cache = _Cache(), _Cache()


def _dump(d: dict) -> str:
    return _dumps(d, separators=(",", ":"))


def logs_line(batch: Sequence[Any]) -> str:
    """``format_line(encode_logs(batch))``, fast, for records without trace context or severity."""
    groups: dict = {}
    for rec in batch:
        groups.setdefault(rec.resource, {}).setdefault(rec.instrumentation_scope or None, []).append(rec)
    parts = []
    for resource, scopes in groups.items():
        if resource.schema_url:
            return format_line(encode_logs(batch))
        sl = []
        for scope, recs in scopes.items():
            if scope is not None and scope.schema_url:
                return format_line(encode_logs(batch))
            rs = []
            for r in recs:
                lr = r.log_record
                if (
                    lr.trace_id
                    or lr.span_id
                    or lr.severity_number
                    or lr.severity_text
                    or lr.event_name
                    or r.dropped_attributes
                    or int(lr.trace_flags or 0)
                    or type(lr.body) is not str
                ):
                    return format_line(encode_logs(batch))
                head = ""
                if lr.timestamp:
                    head += '"timeUnixNano":"' + str(lr.timestamp) + '",'
                if lr.observed_timestamp:
                    head += '"observedTimeUnixNano":"' + str(lr.observed_timestamp) + '",'
                a = _fast_attrs(lr.attributes) if lr.attributes else ""
                rs.append(
                    "{"
                    + head
                    + '"body":{"stringValue":'
                    + _str(lr.body)
                    + "}"
                    + (',"attributes":[' + a + "]" if a else "")
                    + "}"
                )
            scope_json = _scope_cache.get(scope, lambda s: _dump(_scope(s)))
            sl.append('{"scope":' + scope_json + ',"logRecords":[' + ",".join(rs) + "]}")
        res_json = _res_cache.get(resource, lambda r: _dump(_resource(r)))
        parts.append('{"resource":' + res_json + ',"scopeLogs":[' + ",".join(sl) + "]}")
    return '{"resourceLogs":[' + ",".join(parts) + "]}\n" if parts else "{}\n"


def metrics_line(data: Any) -> str:
    """``format_line(encode_metrics(data))``, fast, for Sum metrics."""
    rms = []
    for rm in data.resource_metrics:
        if rm.resource.schema_url:
            return format_line(encode_metrics(data))
        sms = []
        for sm in rm.scope_metrics:
            if sm.scope.schema_url:
                return format_line(encode_metrics(data))
            ms = []
            for m in sm.metrics:
                head = _dump(
                    {k: v for k, v in (("name", m.name), ("description", m.description), ("unit", m.unit)) if v}
                )[:-1]
                pts = []
                for p in m.data.data_points:
                    if (
                        not p.start_time_unix_nano
                        or not p.time_unix_nano
                        or not p.attributes
                        or type(p.value) is not float
                        or not math.isfinite(p.value)
                    ):
                        return format_line(encode_metrics(data))
                    pts.append(
                        '{"attributes":['
                        + _fast_attrs(p.attributes)
                        + '],"startTimeUnixNano":"'
                        + str(p.start_time_unix_nano)
                        + '","timeUnixNano":"'
                        + str(p.time_unix_nano)
                        + '","asDouble":'
                        + repr(p.value)
                        + "}"
                    )
                s = '"dataPoints":[' + ",".join(pts) + "]," if pts else ""
                s += '"aggregationTemporality":' + str(int(m.data.aggregation_temporality))
                if m.data.is_monotonic:
                    s += ',"isMonotonic":true'
                ms.append(head + ("," if head != "{" else "") + '"sum":{' + s + "}}")
            scope_json = _scope_cache.get(sm.scope, lambda s: _dump(_scope(s)))
            sms.append('{"scope":' + scope_json + (',"metrics":[' + ",".join(ms) + "]" if ms else "") + "}")
        res_json = _res_cache.get(rm.resource, lambda r: _dump(_resource(r)))
        rms.append('{"resource":' + res_json + (',"scopeMetrics":[' + ",".join(sms) + "]" if sms else "") + "}")
    return '{"resourceMetrics":[' + ",".join(rms) + "]}\n" if rms else "{}\n"
