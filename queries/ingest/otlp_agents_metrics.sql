-- title: OTLP metrics → Codex and Gemini CLI token points
-- description: reads view otlp_lines(line_no, line) (valid lines that carry resourceMetrics) and
--   selects the rows of temp table otlp_agent_metric_rows from codex.turn.token_usage (a
--   histogram per token_type: its sum) and gemini_cli.token.usage (a counter per type), the
--   metrics otlp_agent_metric names (otlp_metrics leaves them out). Both count cached tokens
--   inside input, so the points of one export that share a time and attributes (all but the
--   type) are combined into the warehouse's token types, in disjoint buckets (docs/agents.md):
--   input (uncached), cacheRead, cacheCreation, output. Differences of cumulative totals stay
--   cumulative totals, so temporality is kept. A point whose value is unusable rejects its
--   whole group (the buckets could not be told apart).

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
                "histogram": {"aggregationTemporality": "VARCHAR", "dataPoints": [{
                    "startTimeUnixNano": "VARCHAR", "timeUnixNano": "VARCHAR", "sum": "VARCHAR",
                    "attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
                        "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
                        "arrayValue": "JSON", "kvlistValue": "JSON"}}]}]}}]}]}]}') AS j
    FROM otlp_lines
    WHERE contains(line, 'codex.turn.token_usage"') OR contains(line, 'gemini_cli.token.usage"')
), resources AS (
    SELECT line_no, unnest(j.resourceMetrics) AS rm FROM parsed
), scopes AS (
    SELECT line_no, coalesce(rm.resource.attributes, []) AS rattrs, unnest(rm.scopeMetrics) AS sm FROM resources
), metrics AS (
    SELECT line_no, rattrs, unnest(sm.metrics) AS m FROM scopes
), claimed AS (
    SELECT * FROM metrics WHERE otlp_agent_metric(m.name)
), histogram_points AS (
    -- Codex: histogram points, the value is their sum
    SELECT line_no, rattrs, m.name AS metric, m.histogram.aggregationTemporality AS temporality_raw,
           unnest(m.histogram.dataPoints) AS p
    FROM claimed WHERE m.name = 'codex.turn.token_usage' AND len(m.histogram.dataPoints) > 0
), sum_points AS (
    -- Gemini: counter points
    SELECT line_no, rattrs, m.name AS metric, m.sum.aggregationTemporality AS temporality_raw,
           unnest(m.sum.dataPoints) AS p
    FROM claimed WHERE m.name = 'gemini_cli.token.usage' AND len(m.sum.dataPoints) > 0
), kv AS (
    SELECT line_no, rattrs, metric, temporality_raw, t_start, t_time, a_value,
           coalesce(attributes, []) AS attrs,
           list_transform(coalesce(attributes, []), lambda a: a.key) AS keys,
           list_transform(coalesce(attributes, []), lambda a: otlp_text(a.value)) AS vals
    FROM (SELECT line_no, rattrs, metric, temporality_raw, p.startTimeUnixNano AS t_start,
                 p.timeUnixNano AS t_time, p.sum AS a_value, p.attributes AS attributes FROM histogram_points
          UNION ALL
          SELECT line_no, rattrs, metric, temporality_raw, p.startTimeUnixNano, p.timeUnixNano,
                 coalesce(p.asDouble, p.asInt), p.attributes FROM sum_points)
), named AS (
    SELECT *,
           coalesce(vals[list_position(keys, 'token_type')], vals[list_position(keys, 'type')]) AS raw_type,
           list_filter(attrs, lambda a: a.key NOT IN ('token_type', 'type')) AS group_attrs,
           CASE WHEN temporality_raw IS NULL OR temporality_raw IN ('0', '1', 'AGGREGATION_TEMPORALITY_UNSPECIFIED',
                         'AGGREGATION_TEMPORALITY_DELTA') THEN 1
                WHEN temporality_raw IN ('2', 'AGGREGATION_TEMPORALITY_CUMULATIVE') THEN 2 END AS temporality,
           otlp_ns(t_start) AS start_ns, otlp_ns(t_time) AS time_ns, otlp_num(a_value) AS value,
           CASE WHEN metric = 'codex.turn.token_usage' THEN 'codex' ELSE 'gemini-cli' END AS agent
    FROM kv
), checked AS (
    SELECT *,
           CASE WHEN temporality IS NULL THEN 'aggregationTemporality'
                WHEN a_value IS NULL OR otlp_bad_count(a_value) OR value IS NULL
                    THEN CASE WHEN metric = 'codex.turn.token_usage' THEN 'sum' ELSE 'asDouble' END
                WHEN time_ns IS NULL THEN 'timeUnixNano'
                WHEN raw_type IS NULL THEN CASE WHEN metric = 'codex.turn.token_usage' THEN 'token_type' ELSE 'type' END
           END AS reject_field,
           md5(metric || chr(30) || otlp_attrs_key(rattrs) || chr(30) || otlp_attrs_key(group_attrs)
               || chr(30) || coalesce(CAST(time_ns AS VARCHAR), '')) AS group_key
    FROM named
), groups AS (
    SELECT group_key, any_value(line_no) AS line_no, any_value(metric) AS metric, any_value(agent) AS agent,
           any_value(rattrs) AS rattrs, any_value(group_attrs) AS group_attrs,
           any_value(keys) AS keys, any_value(vals) AS vals,
           max(temporality) AS temporality, min(start_ns) AS start_ns, any_value(time_ns) AS time_ns,
           bool_or(reject_field IS NOT NULL) AS bad,
           -- the raw values by type (0 when the type was not sent: a delta series appears only
           -- when it changed)
           coalesce(sum(value) FILTER (WHERE raw_type = 'input'), 0) AS v_input,
           coalesce(sum(value) FILTER (WHERE raw_type IN ('cached_input', 'cache')), 0) AS v_cached,
           coalesce(sum(value) FILTER (WHERE raw_type = 'cache_write_input'), 0) AS v_written,
           coalesce(sum(value) FILTER (WHERE raw_type = 'output'), 0) AS v_output,
           coalesce(sum(value) FILTER (WHERE raw_type = 'thought'), 0) AS v_thought,
           coalesce(sum(value) FILTER (WHERE raw_type = 'tool'), 0) AS v_tool,
           list(DISTINCT raw_type) AS raw_types
    FROM checked GROUP BY group_key
), derived AS (
    SELECT g.*, d.token_type,
           CASE d.token_type
               WHEN 'input' THEN greatest(v_input - v_cached - CASE WHEN agent = 'codex' THEN v_written ELSE 0 END, 0)
                                 + CASE WHEN agent = 'gemini-cli' THEN v_tool ELSE 0 END
               WHEN 'cacheRead' THEN v_cached
               WHEN 'cacheCreation' THEN v_written
               ELSE v_output + CASE WHEN agent = 'gemini-cli' THEN v_thought ELSE 0 END
           END AS value,
           md5(metric || chr(30) || otlp_attrs_key(rattrs) || chr(30) || otlp_attrs_key(group_attrs)
               || chr(30) || d.token_type) AS series_key
    FROM groups g, (VALUES ('input'), ('cacheRead'), ('cacheCreation'), ('output')) d(token_type)
    WHERE NOT bad AND (d.token_type <> 'cacheCreation' OR agent = 'codex')
)
SELECT line_no, 'metric:' || metric AS kind, 1 AS n, true AS out,
       CAST(NULL AS VARCHAR) AS reject_field, CAST(NULL AS VARCHAR) AS reject_reason,
       md5(concat_ws(chr(30), series_key, start_ns, time_ns, value)) AS point_key,
       metric, series_key, CAST(temporality AS SMALLINT) AS temporality,
       otlp_ts(start_ns) AS start_ts, otlp_ts(time_ns) AS ts, CAST(value AS DOUBLE) AS value, token_type,
       'otlp-metric' AS source, agent,
       vals[list_position(keys, 'session.id')] AS session_id,
       vals[list_position(keys, 'installation.id')] AS user_id, CAST(NULL AS VARCHAR) AS org_id,
       vals[list_position(keys, 'model')] AS model, CAST(NULL AS VARCHAR) AS query_source,
       '{"token_types_sent":' || to_json(list_sort(raw_types))
           || coalesce(',' || nullif(otlp_members(group_attrs, ['session.id', 'installation.id', 'model']), ''), '')
           || coalesce(',' || nullif(otlp_members(rattrs, keys), ''), '') || '}' AS attributes
FROM derived
UNION ALL BY NAME
SELECT line_no, 'metric:' || metric AS kind, 1 AS n, false AS out, reject_field,
       CASE reject_field
           WHEN 'aggregationTemporality' THEN 'unknown temporality: ' || temporality_raw
           WHEN 'timeUnixNano' THEN 'data point without a time'
           WHEN 'type' THEN 'token.usage point without a type attribute'
           WHEN 'token_type' THEN 'token_usage point without a token_type attribute'
           ELSE CASE WHEN a_value IS NULL THEN 'data point without a value'
                     ELSE 'not a token count: ' || a_value END
       END AS reject_reason
FROM checked WHERE reject_field IS NOT NULL
UNION ALL BY NAME
-- a claimed metric without points is counted like any other metric
SELECT line_no, 'metric:' || m.name AS kind, 1 AS n, false AS out
FROM claimed
WHERE coalesce(len(m.histogram.dataPoints), 0) + coalesce(len(m.sum.dataPoints), 0) = 0
