"""Protobuf OTLP export requests -> OTLP JSON, the form ``kvtrace ingest`` reads.

OTLP JSON is the proto3 JSON mapping with three exceptions that ``google.protobuf.json_format``
gets wrong (docs/formats.md §2, §7): ``traceId``/``spanId``/``parentSpanId``
are hex, not base64; enums are integers; and it is slow (40 ms for 512 log records here). This
converter walks only the fields that are set (``ListFields``, done in C by upb) with a plan per
field cached by descriptor, and has a fast path for ``KeyValue``/``AnyValue``, which make up
most of a Claude Code record. int64 values are decimal strings, bytes are base64, floats that
JSON cannot hold are ``"NaN"``/``"Infinity"``/``"-Infinity"``; unset fields are omitted.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import orjson

from kvtrace.collect.otlp import Signal

_HEX_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
_KEY_VALUE = "opentelemetry.proto.common.v1.KeyValue"
_ANY_VALUE = "opentelemetry.proto.common.v1.AnyValue"


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _any(v) -> dict:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return {"stringValue": v.string_value}
    if kind == "int_value":
        return {"intValue": str(v.int_value)}
    if kind == "double_value":
        return {"doubleValue": _float(v.double_value)}
    if kind == "bool_value":
        return {"boolValue": v.bool_value}
    if kind == "array_value":
        return {"arrayValue": {"values": [_any(x) for x in v.array_value.values]}}
    if kind == "kvlist_value":
        return {"kvlistValue": {"values": _kvs(v.kvlist_value.values)}}
    if kind == "bytes_value":
        return {"bytesValue": _b64(v.bytes_value)}
    return {}


def _kvs(items) -> list:
    out = []
    append = out.append
    for kv in items:
        v = kv.value
        kind = v.WhichOneof("value")
        # The two kinds Claude Code sends are inlined: this loop is most of the work.
        if kind == "string_value":
            append({"key": kv.key, "value": {"stringValue": v.string_value}})
        elif kind == "int_value":
            append({"key": kv.key, "value": {"intValue": str(v.int_value)}})
        else:
            append({"key": kv.key, "value": _any(v)})
    return out


_plans: dict[Any, tuple[str, Callable[[Any], Any]]] = {}


def _plan(fd) -> tuple[str, Callable[[Any], Any]]:
    """How to render one field: its JSON name and a converter for its (possibly repeated) value."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    rep = fd.is_repeated
    if fd.message_type is not None:
        mname = fd.message_type.full_name
        if mname == _KEY_VALUE and rep:
            conv = _kvs
        elif mname == _ANY_VALUE:
            conv = (lambda xs: [_any(x) for x in xs]) if rep else _any
        else:
            conv = (lambda xs: [message_to_dict(x) for x in xs]) if rep else message_to_dict
    elif fd.type in (FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_FIXED64, FD.TYPE_SFIXED64, FD.TYPE_SINT64):
        conv = (lambda xs: [str(x) for x in xs]) if rep else str
    elif fd.type == FD.TYPE_BYTES:
        one = bytes.hex if fd.name in _HEX_FIELDS else _b64
        conv = (lambda xs: [one(x) for x in xs]) if rep else one
    elif fd.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        conv = (lambda xs: [_float(x) for x in xs]) if rep else _float
    elif fd.type == FD.TYPE_ENUM:
        conv = (lambda xs: [int(x) for x in xs]) if rep else int
    else:
        conv = list if rep else (lambda x: x)
    plan = (fd.json_name, conv)
    _plans[fd] = plan
    return plan


def message_to_dict(msg) -> dict:
    """Any OTLP protobuf message as its OTLP JSON dict."""
    out = {}
    for fd, value in msg.ListFields():
        plan = _plans.get(fd) or _plan(fd)
        out[plan[0]] = plan[1](value)
    return out


def protobuf_to_json_line(signal: Signal, body: bytes) -> bytes:
    """One protobuf ``Export*ServiceRequest`` as one compact OTLP JSON line (no newline)."""
    msg = signal.pb(signal.request).FromString(body)
    return orjson.dumps(message_to_dict(msg))
