"""The cheap per-record check behind OTLP partial success: records ingest would have to reject.

It follows the OTLP JSON normalization (``queries/ingest/otlp_{logs,metrics,spans}.sql``) for the
records kvtrace reads: Claude Code's ``api_request`` event, ``token.usage`` point and
``llm_request`` span. A token count that is present but not a non-negative integer (text,
negative, NaN, infinite, boolean), a missing time, a token.usage point without its ``type`` or with
an unknown temporality make the record impossible to normalize. Such records are dropped from the stored batch
and counted in the answer, so the client learns of them instead of ingest skipping them later.
Values that ingest drops silently (an object or array where a number belongs) pass.

What is a count and what is a time is not restated here: a value that is not plain ASCII digits
is judged by ingest's own SQL macros (``otlp_bad_count``, ``otlp_ns``, ``otlp_event_ts`` in
``queries/ingest/otlp_macros.sql``), run by DuckDB in :class:`IngestRules`, so the collector
accepts exactly what ingest stores: Python's ``float("١٠٠٠")`` or
``datetime.fromisoformat("20260302T091202Z")`` would accept text that ingest then drops.
"""

from __future__ import annotations

import functools
import math
import re
import threading

from kvtrace.ingest.otlp_common import new_connection

TOKEN_ATTRIBUTES = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens",
                    "cache_creation_5m_tokens", "cache_creation_1h_tokens")
_TOKEN_SET = frozenset(TOKEN_ATTRIBUTES)
_PREFIX = "claude_code."
_INT64_MAX = 2**63 - 1


class IngestRules:
    """Ingest's SQL rules for one text value, evaluated by DuckDB with ingest's own macros (an
    in-memory connection, opened on first use: most batches never need it, see the fast path)."""

    _SQL = {"bad_count": "SELECT otlp_bad_count(?)", "ns": "SELECT otlp_ns(?) IS NOT NULL",
            "event_time": "SELECT otlp_event_ts(?) IS NOT NULL"}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._con = None

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one instance for the process
    def holds(self, rule: str, text: str) -> bool:
        with self._lock:
            if self._con is None:
                self._con = new_connection()
            return bool(self._con.execute(self._SQL[rule], [text]).fetchone()[0])


INGEST_RULES = IngestRules()


def _plain_int(text: str) -> int | None:
    """The value of ASCII digits (spaces around allowed) within int64: what ingest casts the same
    way without asking it; None for anything else."""
    t = text.strip()
    if t.isascii() and t.isdigit() and len(t) <= 19:
        v = int(t)
        return v if v <= _INT64_MAX else None
    return None


def _bad_count_text(text: str) -> bool:
    """A present token count ingest rejects (``otlp_bad_count``)."""
    return _plain_int(text) is None and INGEST_RULES.holds("bad_count", text)


def _bad_double(x: float) -> bool:
    """A binary double as a token count: ingest casts its value (no text involved)."""
    return not math.isfinite(x) or round(x) < 0 or round(x) > _INT64_MAX


def _event(body: object, event_name: object, attr_event: object) -> object:
    """Ingest's rule: the body's ``claude_code.<name>``, else ``eventName``, else attribute ``event.name``."""
    if isinstance(body, str) and body.startswith(_PREFIX):
        return body[len(_PREFIX):]
    if event_name is not None:
        return event_name[len(_PREFIX):] if isinstance(event_name, str) and event_name.startswith(_PREFIX) else event_name
    return attr_event


def ns_present(x: object) -> bool:
    """A usable nanosecond time, as ingest reads one: an int64 > 0 (decimal string or number)."""
    if isinstance(x, bool) or not isinstance(x, (str, int, float)):
        return False
    if isinstance(x, str):
        v = _plain_int(x)
        if v is None:
            return INGEST_RULES.holds("ns", x)    # ingest's otlp_ns decides ("١٢٣" is no time)
        x = v
    try:
        v = x if isinstance(x, int) else round(x)
    except (ValueError, OverflowError):
        return False
    return 0 < v <= _INT64_MAX


def pb_ns_present(v: int) -> bool:
    """:func:`ns_present` for a protobuf fixed64 time: past 2^63 - 1 ingest reads no time."""
    return 0 < v <= _INT64_MAX


def _iso_present(x: object) -> bool:
    """An ``event.timestamp`` ingest reads as a time (``otlp_event_ts``)."""
    return isinstance(x, str) and INGEST_RULES.holds("event_time", x)


# -- fast path: a whole batch's token counts checked by regular expressions -------------------
#
# Walking ~20 attributes per record in Python costs 15 ms per 512-record batch. Almost every batch
# is clean, and that can be proved over the raw bytes in C: every occurrence of a token key must
# be the key of an attribute whose value is a plain non-negative integer. When the counts differ
# (odd encodings, other values, escapes), the exact per-record check runs instead.

_KEYS_RE = "|".join(k.replace(".", r"\.") for k in TOKEN_ATTRIBUTES)
_JSON_KEY = re.compile(('"(?:' + _KEYS_RE + ')"').encode())
_JSON_CLEAN = re.compile((r'"key"\s*:\s*"(?:' + _KEYS_RE + r')"\s*,\s*"value"\s*:\s*\{\s*"(?:intValue|stringValue)"'
                          r'\s*:\s*(?:"\d{1,18}"|\d{1,18})\s*\}').encode())
_PB_KEY = re.compile(("(?:" + _KEYS_RE + ")").encode())
# KeyValue{key=1, value=2: AnyValue{int_value=3 (varint)}}, with AnyValue's length = 1 + varint length
# (a non-negative int64 takes at most 9 varint bytes; a negative one takes 10 and fails the match).
_PB_INT = b"(?:" + b"|".join(bytes([n + 1]) + b"\x18" + b"[\x80-\xff]" * (n - 1) + b"[\x00-\x7f]"
                             for n in range(1, 10)) + b")"
_PB_CLEAN = re.compile(b"(?:" + b"|".join(b"\n" + re.escape(bytes([len(k)])) + re.escape(k.encode()) + b"\x12" + _PB_INT
                                           for k in TOKEN_ATTRIBUTES) + b")", re.DOTALL)


_PRINTABLE_ESCAPE = re.compile(rb"\\u00[2-7][0-9a-fA-F]")


def tokens_clean_json(body: bytes) -> bool:
    """True when every token attribute in an OTLP JSON body is a plain non-negative integer."""
    if _PRINTABLE_ESCAPE.search(body):
        return False   # a key spelled with escapes ("input\u005ftokens") could hide from the patterns
    return len(_JSON_KEY.findall(body)) == len(_JSON_CLEAN.findall(body))


def tokens_clean_pb(body: bytes) -> bool:
    """True when every token attribute in a protobuf body is an ``int_value`` >= 0."""
    return len(_PB_KEY.findall(body)) == len(_PB_CLEAN.findall(body))


def has_time_json(rec: dict) -> bool:
    return ns_present(rec.get("timeUnixNano")) or ns_present(rec.get("observedTimeUnixNano"))


def has_start_json(span: dict) -> bool:
    return ns_present(span.get("startTimeUnixNano"))


# -- OTLP JSON -------------------------------------------------------------------------------

def _json_text(value: object) -> str | None:
    """An AnyValue as ingest reads it (stringValue, intValue, doubleValue, boolValue; arrays as '[')."""
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        v = value.get(key)
        if v is not None:
            if isinstance(v, bool):
                return "true" if v else "false"
            return v if isinstance(v, str) else ("[" if isinstance(v, (list, dict)) else repr(v))
    if value.get("arrayValue") is not None or value.get("kvlistValue") is not None:
        return "["
    return None


def json_record_problem(rec: dict) -> str | None:
    """Why an OTLP JSON log record cannot become a request row, or None if it can (or is no request)."""
    attrs = rec.get("attributes")
    attrs = attrs if isinstance(attrs, list) else []
    first: dict[str, object] = {}
    for kv in attrs:
        if isinstance(kv, dict):
            k = kv.get("key")
            if isinstance(k, str) and k not in first and (k in _TOKEN_SET or k in ("event.name", "event.timestamp",
                                                                                   "request_id")):
                first[k] = kv.get("value")
    body = rec.get("body")
    event = _event(body.get("stringValue") if isinstance(body, dict) else None, rec.get("eventName"),
                   _json_text(first.get("event.name")))
    if event != "api_request":
        return None
    name = named("api_request", _json_text(first.get("request_id")))
    for k in TOKEN_ATTRIBUTES:
        if k in first:
            text = _json_text(first[k])
            if text is not None and _bad_count_text(text):
                return f"{name}: field '{k}': not a token count: {text!r}"
    stamp = _json_text(first.get("event.timestamp"))
    if not (ns_present(rec.get("timeUnixNano")) or ns_present(rec.get("observedTimeUnixNano")) or _iso_present(stamp)):
        return f"{name}: no time (timeUnixNano, observedTimeUnixNano or event.timestamp{_quoted(stamp)})"
    return None


def named(kind: str, request_id: str | None) -> str:
    """How an answer names a rejected record: its kind and request id."""
    return f"{kind} {request_id!r}" if request_id else f"{kind} without a request_id"


def _quoted(stamp: str | None) -> str:
    return f" {stamp!r} is not an ISO 8601 time ingest reads" if stamp is not None else ""


# -- protobuf --------------------------------------------------------------------------------

def _pb_bad_count(v) -> bool:
    kind = v.WhichOneof("value")
    if kind == "int_value":
        return v.int_value < 0
    if kind == "double_value":
        return _bad_double(v.double_value)
    if kind == "string_value":
        return _bad_count_text(v.string_value)
    return kind == "bool_value"


def pb_record_problem(rec) -> str | None:
    """:func:`json_record_problem` for a protobuf ``LogRecord``."""
    body = rec.body.string_value if rec.body.WhichOneof("value") == "string_value" else None
    event = None
    if body is not None and body.startswith(_PREFIX):
        event = body[len(_PREFIX):]
    elif rec.event_name:
        event = _event(None, rec.event_name, None)
    first: dict[str, object] = {}
    for kv in rec.attributes:
        if kv.key not in first and (kv.key in _TOKEN_SET or kv.key in ("event.name", "event.timestamp", "request_id")):
            first[kv.key] = kv.value
    if event is None and "event.name" in first:
        event = first["event.name"].string_value
    if event != "api_request":
        return None
    name = named("api_request", first["request_id"].string_value if "request_id" in first else None)
    for k in TOKEN_ATTRIBUTES:
        if k in first and _pb_bad_count(first[k]):
            return f"{name}: field '{k}': not a token count: {_pb_text(first[k])!r}"
    ts = first.get("event.timestamp")
    if not (pb_ns_present(rec.time_unix_nano) or pb_ns_present(rec.observed_time_unix_nano)
            or (ts is not None and _iso_present(ts.string_value))):
        return f"{name}: no time (timeUnixNano, observedTimeUnixNano or event.timestamp{_quoted(ts and ts.string_value)})"
    return None


def _pb_text(v) -> str:
    kind = v.WhichOneof("value")
    return str(getattr(v, kind)) if kind else ""


# -- token.usage points and llm_request spans ----------------------------------------------

TOKEN_METRIC = "claude_code.token.usage"
LLM_SPAN = "claude_code.llm_request"
_TEMPORALITIES = {None, "0", "1", "2", "AGGREGATION_TEMPORALITY_UNSPECIFIED", "AGGREGATION_TEMPORALITY_DELTA",
                  "AGGREGATION_TEMPORALITY_CUMULATIVE"}


def json_point_problem(temporality: object, point: object) -> str | None:
    """Why a ``claude_code.token.usage`` sum point (OTLP JSON) cannot be stored, or None."""
    t = None if temporality is None else str(temporality) if not isinstance(temporality, (dict, list)) else "?"
    if t not in _TEMPORALITIES:
        return f"unknown temporality {t}"
    if not isinstance(point, dict):
        return None   # ingest reads nothing from it
    value = point.get("asDouble")
    value = point.get("asInt") if value is None else value
    value = None if value is None else _json_text({"stringValue": value})
    if value is None or value.lstrip().startswith(("{", "[")) or _bad_count_text(value):
        return "data point without a token count (asDouble or asInt)"
    if not ns_present(point.get("timeUnixNano")):
        return "data point without a time"
    attrs = point.get("attributes")
    for kv in attrs if isinstance(attrs, list) else []:
        if isinstance(kv, dict) and kv.get("key") == "type":
            if _json_text(kv.get("value")) is None:
                break
            return None
    return "token.usage point without a type attribute"


def pb_point_problem(temporality: int, point) -> str | None:
    """:func:`json_point_problem` for a protobuf ``NumberDataPoint``."""
    if temporality not in (0, 1, 2):
        return f"unknown temporality {temporality}"
    kind = point.WhichOneof("value")
    if kind is None or (kind == "as_int" and point.as_int < 0) or (
            kind == "as_double" and _bad_double(point.as_double)):
        return "data point without a token count (asDouble or asInt)"
    if not pb_ns_present(point.time_unix_nano):
        return "data point without a time"
    for kv in point.attributes:
        if kv.key == "type":
            if kv.value.WhichOneof("value") in (None, "bytes_value"):
                break
            return None
    return "token.usage point without a type attribute"


def json_span_problem(span: dict) -> str | None:
    """Why a ``claude_code.llm_request`` span (OTLP JSON) cannot become a request row, or None."""
    if span.get("name") != LLM_SPAN:
        return None
    attrs = span.get("attributes")
    first: dict[str, object] = {}
    for kv in attrs if isinstance(attrs, list) else []:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str) and kv["key"] not in first:
            first[kv["key"]] = kv.get("value")
    rid = _json_text(first.get("request_id"))
    if not rid:
        return None   # only counted by ingest
    for k in TOKEN_ATTRIBUTES:
        text = _json_text(first.get(k)) if k in first else None
        if text is not None and _bad_count_text(text):
            return f"{named('llm_request span', rid)}: field '{k}': not a token count: {text!r}"
    return None if ns_present(span.get("startTimeUnixNano")) else f"{named('llm_request span', rid)} without a start time"


def pb_span_problem(span) -> str | None:
    """:func:`json_span_problem` for a protobuf ``Span``."""
    if span.name != LLM_SPAN:
        return None
    first: dict[str, object] = {}
    for kv in span.attributes:
        first.setdefault(kv.key, kv.value)
    rid = first.get("request_id")
    if rid is None or rid.WhichOneof("value") in (None, "bytes_value") or (
            rid.WhichOneof("value") == "string_value" and not rid.string_value):
        return None
    name = named("llm_request span", _pb_text(rid))
    for k in TOKEN_ATTRIBUTES:
        if k in first and _pb_bad_count(first[k]):
            return f"{name}: field '{k}': not a token count: {_pb_text(first[k])!r}"
    return None if pb_ns_present(span.start_time_unix_nano) else f"{name} without a start time"


def reject_message(rejected: int, first_problem: str | None) -> str | None:
    if not rejected:
        return None
    return f"{rejected} record(s) cannot be normalized and were dropped; first: {first_problem}"
