-- title: OTLP metrics → Claude Code token.usage points
-- description: reads view otlp_lines(line_no, line) (valid lines that carry resourceMetrics) and
--   selects the rows of temp table otlp_metric_rows (each chunk's are appended): one row per
--   claude_code.token.usage data point (out = true unless a field is unusable), plus one row per
--   other metric, counted by name with its number of points (n). Temporality is read per metric; the
--   warehouse view request_usage sums delta points and differences cumulative series.

WITH parsed AS (
    SELECT line_no, from_json(line, '{"resourceMetrics": [{
        "resource": {"attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
            "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
            "arrayValue": "JSON", "kvlistValue": "JSON"}}]},
        "scopeMetrics": [{
            "metrics": [{
                "name": "VARCHAR",
                "sum": {"aggregationTemporality": "VARCHAR", "dataPoints": [{
                    "startTimeUnixNano": "VARCHAR", "timeUnixNano": "VARCHAR",
                    "asDouble": "VARCHAR", "asInt": "VARCHAR",
                    "attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
                        "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
                        "arrayValue": "JSON", "kvlistValue": "JSON"}}]}]},
                "gauge": {"dataPoints": [{"timeUnixNano": "VARCHAR"}]},
                "histogram": {"dataPoints": [{"timeUnixNano": "VARCHAR"}]}}]}]}]}') AS j
    FROM otlp_lines
), resources AS (
    SELECT line_no, unnest(j.resourceMetrics) AS rm FROM parsed
), scopes AS (
    SELECT line_no, coalesce(rm.resource.attributes, []) AS rattrs,
           otlp_member_list(coalesce(rm.resource.attributes, [])) AS rmembers, unnest(rm.scopeMetrics) AS sm
    FROM resources
), metrics AS (
    SELECT line_no, rattrs, rmembers, unnest(sm.metrics) AS m FROM scopes
), tokens AS (
    SELECT line_no, rattrs, rmembers, m.name AS metric, m.sum.aggregationTemporality AS temporality_raw,
           unnest(m.sum.dataPoints) AS p
    FROM metrics
    WHERE m.name = 'claude_code.token.usage' AND len(m.sum.dataPoints) > 0
), kv AS (
    SELECT line_no, rattrs, rmembers, metric, temporality_raw, p.startTimeUnixNano AS t_start,
           p.timeUnixNano AS t_time, coalesce(p.asDouble, p.asInt) AS a_value,
           CASE WHEN p.asDouble IS NOT NULL THEN 'asDouble' ELSE 'asInt' END AS value_field,
           coalesce(p.attributes, []) AS attrs,
           list_transform(coalesce(p.attributes, []), lambda a: a.key) AS keys,
           list_transform(coalesce(p.attributes, []), lambda a: otlp_text(a.value)) AS vals
    FROM tokens
), named AS (
    SELECT *,
           vals[list_position(keys, 'type')] AS token_type,
           vals[list_position(keys, 'session.id')] AS session_id,
           vals[list_position(keys, 'user.id')] AS user_id,
           vals[list_position(keys, 'organization.id')] AS org_id,
           vals[list_position(keys, 'model')] AS model,
           vals[list_position(keys, 'query_source')] AS a_query_source,
           -- 1 delta, 2 cumulative. Missing or 0 (unspecified) is read as delta: Claude Code's
           -- default, and v1.0.48 sent no temporality at all (anthropics/claude-code#3353).
           CASE WHEN temporality_raw IS NULL OR temporality_raw IN ('0', '1', 'AGGREGATION_TEMPORALITY_UNSPECIFIED',
                         'AGGREGATION_TEMPORALITY_DELTA') THEN 1
                WHEN temporality_raw IN ('2', 'AGGREGATION_TEMPORALITY_CUMULATIVE') THEN 2 END AS temporality,
           otlp_ns(t_start) AS start_ns, otlp_ns(t_time) AS time_ns,
           otlp_num(a_value) AS value
    FROM kv
), checked AS (
    SELECT *,
           CASE WHEN temporality IS NULL THEN 'aggregationTemporality'
                WHEN a_value IS NULL OR otlp_bad_count(a_value) OR value IS NULL THEN value_field
                WHEN time_ns IS NULL THEN 'timeUnixNano'
                WHEN token_type IS NULL THEN 'type' END AS reject_field,
           md5(metric || chr(30) || otlp_attrs_key(rattrs) || chr(30) || otlp_attrs_key(attrs)) AS series_key
    FROM named
)
SELECT line_no, 'metric:' || metric AS kind, 1 AS n, reject_field IS NULL AS out, reject_field,
       CASE reject_field
           WHEN 'aggregationTemporality' THEN 'unknown temporality: ' || temporality_raw
           WHEN 'timeUnixNano' THEN 'data point without a time'
           WHEN 'type' THEN 'token.usage point without a type attribute'
           ELSE CASE WHEN a_value IS NULL THEN 'data point without a value (asDouble or asInt)'
                     ELSE 'not a token count: ' || a_value END
       END AS reject_reason,
       -- The same point exported twice (a retry, a replayed spool) gets the same key.
       md5(concat_ws(chr(30), series_key, start_ns, time_ns, value)) AS point_key,
       metric, series_key, CAST(temporality AS SMALLINT) AS temporality,
       otlp_ts(start_ns) AS start_ts, otlp_ts(time_ns) AS ts, value, token_type,
       'otlp-metric' AS source, 'claude-code' AS agent, session_id, user_id, org_id, model,
       otlp_qs(a_query_source) AS query_source,
       otlp_kv_attributes(keys, vals, ['type', 'session.id', 'user.id', 'organization.id', 'model'],
                       rmembers) AS attributes
FROM checked
UNION ALL BY NAME
-- Every other metric is only counted, by name, with its number of points.
SELECT line_no, 'metric:' || coalesce(m.name, '(unnamed)') AS kind,
       greatest(coalesce(len(m.sum.dataPoints), len(m.gauge.dataPoints), len(m.histogram.dataPoints), 1), 1) AS n,
       false AS out
FROM metrics
WHERE (m.name IS DISTINCT FROM 'claude_code.token.usage' OR coalesce(len(m.sum.dataPoints), 0) = 0)
  AND NOT otlp_agent_metric(m.name)   -- Codex and Gemini token metrics: otlp_agents_metrics
