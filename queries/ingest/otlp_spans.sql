-- title: OTLP spans → Claude Code requests
-- description: reads view otlp_lines(line_no, line) (valid lines that carry resourceSpans) and
--   selects the rows of temp table otlp_span_rows (each chunk's are appended). A Claude Code
--   claude_code.llm_request span (traces beta) with a request_id becomes a request row keyed by that
--   id, the key of the api_request event of the same request, so the two merge instead of counting
--   twice. Every other span is only counted, by name (GenAI semantic-convention spans are not read
--   yet).

WITH parsed AS (
    SELECT line_no, from_json(line, '{"resourceSpans": [{
        "resource": {"attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
            "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
            "arrayValue": "JSON", "kvlistValue": "JSON"}}]},
        "scopeSpans": [{
            "spans": [{
                "name": "VARCHAR", "startTimeUnixNano": "VARCHAR", "endTimeUnixNano": "VARCHAR",
                "attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
                    "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
                    "arrayValue": "JSON", "kvlistValue": "JSON"}}]}]}]}]}') AS j
    FROM otlp_lines
), resources AS (
    SELECT line_no, unnest(j.resourceSpans) AS rs FROM parsed
), scopes AS (
    SELECT line_no, otlp_member_list(coalesce(rs.resource.attributes, [])) AS rmembers, unnest(rs.scopeSpans) AS ss
    FROM resources
), spans AS (
    -- Slimmed to key / text lists before unnest copies them (see otlp_logs).
    SELECT line_no, rmembers, unnest(list_transform(ss.spans, lambda s: {
               'name': s.name, 't_start': s.startTimeUnixNano, 't_end': s.endTimeUnixNano,
               'keys': list_transform(coalesce(s.attributes, []), lambda a: a.key),
               'vals': list_transform(coalesce(s.attributes, []), lambda a: otlp_text(a.value))})) AS s
    FROM scopes
), kv AS (
    SELECT line_no, rmembers, s.name AS name, s.t_start AS t_start, s.t_end AS t_end, s.keys AS keys, s.vals AS vals
    FROM spans
), named AS (
    SELECT *,
           name = 'claude_code.llm_request' AS is_llm,
           nullif(vals[list_position(keys, 'request_id')], '') AS request_id,
           vals[list_position(keys, 'session.id')] AS session_id,
           vals[list_position(keys, 'user.id')] AS user_id,
           vals[list_position(keys, 'organization.id')] AS org_id,
           coalesce(vals[list_position(keys, 'model')], vals[list_position(keys, 'gen_ai.request.model')]) AS model,
           vals[list_position(keys, 'query_source')] AS a_query_source,
           vals[list_position(keys, 'agent.name')] AS a_agent_name,
           vals[list_position(keys, 'input_tokens')] AS a_input,
           vals[list_position(keys, 'output_tokens')] AS a_output,
           vals[list_position(keys, 'cache_read_tokens')] AS a_read,
           vals[list_position(keys, 'cache_creation_tokens')] AS a_write,
           vals[list_position(keys, 'cache_creation_5m_tokens')] AS a_write_5m,
           vals[list_position(keys, 'cache_creation_1h_tokens')] AS a_write_1h,
           vals[list_position(keys, 'duration_ms')] AS a_duration,
           vals[list_position(keys, 'ttft_ms')] AS a_ttft,
           otlp_ns(t_start) AS start_ns, otlp_ns(t_end) AS end_ns
    FROM kv
), checked AS (
    SELECT *,
           otlp_int(a_input) AS n_input, otlp_int(a_output) AS n_output, otlp_int(a_read) AS n_read,
           otlp_int(a_write) AS n_write, otlp_int(a_write_5m) AS n_write_5m, otlp_int(a_write_1h) AS n_write_1h,
           CASE WHEN NOT is_llm OR request_id IS NULL THEN NULL
                WHEN otlp_bad_count(a_input) THEN 'input_tokens'
                WHEN otlp_bad_count(a_output) THEN 'output_tokens'
                WHEN otlp_bad_count(a_read) THEN 'cache_read_tokens'
                WHEN otlp_bad_count(a_write) THEN 'cache_creation_tokens'
                WHEN otlp_bad_count(a_write_5m) THEN 'cache_creation_5m_tokens'
                WHEN otlp_bad_count(a_write_1h) THEN 'cache_creation_1h_tokens'
                WHEN start_ns IS NULL THEN 'startTimeUnixNano'
           END AS reject_field
    FROM named
)
SELECT line_no,
       -- Without a request id a span cannot be matched to its api_request event: counted only.
       CASE WHEN is_llm AND request_id IS NULL THEN 'span:claude_code.llm_request (no request_id)'
            ELSE 'span:' || coalesce(name, '(unnamed)') END AS kind,
       is_llm AND request_id IS NOT NULL AND reject_field IS NULL AS out,
       reject_field,
       CASE WHEN reject_field = 'startTimeUnixNano' THEN 'llm_request span without a start time'
            WHEN reject_field IS NOT NULL THEN 'not a token count: ' || CASE reject_field
                WHEN 'input_tokens' THEN a_input WHEN 'output_tokens' THEN a_output
                WHEN 'cache_read_tokens' THEN a_read WHEN 'cache_creation_tokens' THEN a_write
                WHEN 'cache_creation_5m_tokens' THEN a_write_5m ELSE a_write_1h END
       END AS reject_reason,
       request_id AS request_key, request_id, CAST(NULL AS VARCHAR) AS message_id,
       otlp_ts(start_ns) AS ts, 'otlp-span' AS source, 'claude-code' AS agent, session_id,
       CASE WHEN otlp_qs(a_query_source) = 'subagent' THEN coalesce(a_agent_name, a_query_source)
            ELSE 'main' END AS thread_id,
       user_id, org_id, CAST(NULL AS VARCHAR) AS project, model, otlp_qs(a_query_source) AS query_source,
       coalesce(n_input, 0) AS input_tokens, coalesce(n_read, 0) AS cache_read_tokens,
       coalesce(n_write_5m, 0) AS cache_write_5m_tokens, coalesce(n_write_1h, 0) AS cache_write_1h_tokens,
       CASE WHEN n_write_5m IS NULL AND n_write_1h IS NULL THEN coalesce(n_write, 0)
            ELSE greatest(coalesce(n_write, 0) - coalesce(n_write_5m, 0) - coalesce(n_write_1h, 0), 0)
       END AS cache_write_unknown_tokens,
       coalesce(n_output, 0) AS output_tokens,
       CAST(NULL AS DOUBLE) AS cost_usd,
       coalesce(otlp_num(a_duration), (end_ns - start_ns) / 1e6) AS duration_ms,
       otlp_num(a_ttft) AS ttft_ms, false AS is_sidechain,
       otlp_kv_attributes(keys, vals, ['session.id', 'user.id', 'organization.id', 'model',
                'request_id', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_creation_tokens',
                'cache_creation_5m_tokens', 'cache_creation_1h_tokens', 'duration_ms', 'ttft_ms'],
                rmembers) AS attributes
FROM checked
-- Spans with GenAI/OpenInference token usage are read by otlp_genai_spans.
WHERE NOT otlp_usage_span(name, keys)
