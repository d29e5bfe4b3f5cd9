-- title: OTLP JSON helper macros
-- description: scalar helpers shared by the OTLP JSON normalization queries (created in the
--   parser's private in-memory connection, never in the warehouse). ``otlp_qs`` (query source
--   normalization) is created from kvtrace.ingest.base.query_source_sql next to these.

-- An AnyValue (decoded with every scalar field as VARCHAR) as text, whatever its wire type:
-- intValue as a JSON number or an int64 string, stringValue, doubleValue, boolValue.
CREATE OR REPLACE MACRO otlp_text(v) AS
    coalesce(v.stringValue, v.intValue, v.doubleValue, v.boolValue,
             CAST(v.arrayValue AS VARCHAR), CAST(v.kvlistValue AS VARCHAR));

-- An object or array where a number belongs (the Desktop app has sent {"doubleValue":{}}):
-- the value is dropped, not rejected.
CREATE OR REPLACE MACRO otlp_dropped(x) AS starts_with(x, '{') OR starts_with(x, '[');

-- A measure from text, NULL when absent or dropped (casts accept surrounding whitespace; a
-- dropped object or array never casts, so no CASE is needed: it cost 3% of the log query).
CREATE OR REPLACE MACRO otlp_num(x) AS TRY_CAST(x AS DOUBLE);

-- A count from text ('12', '12.0', '1.2e1'; fractions round): NULL when absent, dropped, or not
-- a count.
CREATE OR REPLACE MACRO otlp_int(x) AS TRY_CAST(x AS BIGINT);

-- Present, not dropped, and not a count (text, NaN, infinite, negative, beyond int64): the
-- record is rejected, naming the attribute.
CREATE OR REPLACE MACRO otlp_bad_count(x) AS
    x IS NOT NULL AND NOT otlp_dropped(x) AND coalesce(TRY_CAST(x AS BIGINT) < 0, true);

-- fixed64 nanoseconds (decimal string or JSON number) → BIGINT; 0 means unset in proto3, and a
-- negative time is no time either.
CREATE OR REPLACE MACRO otlp_ns(x) AS
    nullif(greatest(coalesce(TRY_CAST(x AS BIGINT), TRY_CAST(TRY_CAST(x AS DOUBLE) AS BIGINT)), 0), 0);

CREATE OR REPLACE MACRO otlp_ts(ns) AS make_timestamp(ns // 1000);

-- An event.timestamp attribute (ISO 8601 text as DuckDB reads a TIMESTAMPTZ) → TIMESTAMP in UTC;
-- NULL when it does not parse.
CREATE OR REPLACE MACRO otlp_event_ts(x) AS CAST(TRY_CAST(x AS TIMESTAMPTZ) AS TIMESTAMP);

-- The members of a JSON object (without braces), '' or NULL for none: parallel key / text
-- lists, except the keys in ``skip``, as text values. Built as text rather than a MAP: duplicate
-- or NULL keys must not fail the whole batch. (array_to_string leaves out the NULLs of the
-- skipped keys: cheaper than list_filter over list_zip, measured.)
CREATE OR REPLACE MACRO otlp_kv_members(keys, vals, skip) AS
    array_to_string(list_transform(keys, lambda k, i: CASE WHEN NOT list_contains(skip, k)
        THEN to_json(k) || ':' || coalesce(to_json(vals[i]), 'null') END), ',');

-- The same from an attribute list.
CREATE OR REPLACE MACRO otlp_members(attrs, skip) AS
    otlp_kv_members(list_transform(attrs, lambda a: a.key), list_transform(attrs, lambda a: otlp_text(a.value)), skip);

-- An attribute list as JSON members with their keys ({k, m}): the resource attributes are made
-- members once per resource, not once per record.
CREATE OR REPLACE MACRO otlp_member_list(attrs) AS
    list_transform(attrs, lambda a: {'k': a.key, 'm': to_json(a.key) || ':' || coalesce(to_json(otlp_text(a.value)), 'null')});

-- The attributes column: record attributes not in a column, then the resource attributes (an
-- otlp_member_list) the record does not repeat.
CREATE OR REPLACE MACRO otlp_kv_attributes(keys, vals, skip, rmembers) AS
    '{' || concat_ws(',', nullif(otlp_kv_members(keys, vals, skip), ''),
                     nullif(array_to_string(list_transform(rmembers,
                         lambda e: CASE WHEN NOT list_contains(keys, e.k) THEN e.m END), ','), '')) || '}';

-- The same from a record's attribute list (and its keys).
CREATE OR REPLACE MACRO otlp_attributes(attrs, skip, rattrs, keys) AS
    '{' || concat_ws(',', nullif(otlp_members(attrs, skip), ''), nullif(otlp_members(rattrs, keys), '')) || '}';

-- A content hash of an attribute list that does not depend on attribute order.
CREATE OR REPLACE MACRO otlp_attrs_key(attrs) AS
    array_to_string(list_sort(list_transform(attrs,
        lambda a: coalesce(a.key, '') || '=' || coalesce(otlp_text(a.value), ''))), chr(31));

-- An ExportLogsServiceRequest line parsed with the fields the log queries read (otlp_logs for
-- Claude Code, otlp_agents_logs for Codex and Gemini CLI): one schema, kept here. The other
-- signals' keys (and their snake_case spellings) are parsed as JSON only, not read.
CREATE OR REPLACE MACRO otlp_logs_json(line) AS from_json(line, '{
    "resourceMetrics": "JSON", "resourceSpans": "JSON",
    "resource_logs": "JSON", "resource_metrics": "JSON", "resource_spans": "JSON",
    "resourceLogs": [{
        "resource": {"attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
            "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
            "arrayValue": "JSON", "kvlistValue": "JSON"}}]},
        "scopeLogs": [{
            "scope": {"name": "VARCHAR"},
            "logRecords": [{
                "timeUnixNano": "VARCHAR", "observedTimeUnixNano": "VARCHAR", "eventName": "VARCHAR",
                "body": {"stringValue": "VARCHAR"},
                "attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
                    "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
                    "arrayValue": "JSON", "kvlistValue": "JSON"}}]}]}]}]}');
