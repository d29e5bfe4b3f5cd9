-- title: OTLP log records → Claude Code requests
-- description: reads view otlp_lines(line_no, line) (lines that carry resourceLogs) and
--   selects the rows of temp table otlp_log_rows (each chunk's are appended): one row per log
--   record. Claude Code api_request events become request rows (out = true) unless a field is
--   unusable (reject_field); every other record is only counted by kind (event:<name> for Claude
--   Code events, log:<name> otherwise); a Codex or Gemini CLI event is a row of kind NULL, which
--   only tells the parser to give its line to otlp_agents_logs. Numbers are read by attribute
--   name whatever the wire type (otlp_text / otlp_num); the whole per-record normalization runs
--   here, vectorized, not in Python.
--   The lines were classified by ingest/otlp_lines (valid JSON, resourceLogs an array).

WITH parsed AS (
    SELECT line_no, otlp_logs_json(line) AS j
    FROM otlp_lines
), resources AS (
    SELECT line_no, unnest(j.resourceLogs) AS rl FROM parsed
), scopes AS (
    SELECT line_no, otlp_member_list(coalesce(rl.resource.attributes, [])) AS rmembers, unnest(rl.scopeLogs) AS sl
    FROM resources
), records AS (
    -- Each record is slimmed to key / text lists inside the parsed list, before unnest copies
    -- it: a quarter less work than unnesting whole records (measured). Lookups are list_position.
    SELECT line_no, rmembers, sl.scope.name AS scope, unnest(list_transform(sl.logRecords, lambda r: {
               't_time': r.timeUnixNano, 't_observed': r.observedTimeUnixNano,
               'event_field': r.eventName, 'body': r.body.stringValue,
               'keys': list_transform(coalesce(r.attributes, []), lambda a: a.key),
               'vals': list_transform(coalesce(r.attributes, []), lambda a: otlp_text(a.value))})) AS r
    FROM scopes
), named AS (
    SELECT line_no, rmembers, r.keys AS keys, r.vals AS vals, r.t_time AS t_time, r.t_observed AS t_observed,
           r.event_field AS event_field, r.body AS body, scope,
           vals[list_position(keys, 'event.name')] AS a_event,
           vals[list_position(keys, 'event.timestamp')] AS a_event_ts,
           vals[list_position(keys, 'event.sequence')] AS a_seq,
           vals[list_position(keys, 'prompt.id')] AS a_prompt,
           vals[list_position(keys, 'session.id')] AS session_id,
           vals[list_position(keys, 'user.id')] AS user_id,
           vals[list_position(keys, 'organization.id')] AS org_id,
           vals[list_position(keys, 'model')] AS model,
           vals[list_position(keys, 'query_source')] AS a_query_source,
           vals[list_position(keys, 'agent.name')] AS a_agent_name,
           nullif(vals[list_position(keys, 'request_id')], '') AS request_id,
           vals[list_position(keys, 'input_tokens')] AS a_input,
           vals[list_position(keys, 'output_tokens')] AS a_output,
           vals[list_position(keys, 'cache_read_tokens')] AS a_read,
           vals[list_position(keys, 'cache_creation_tokens')] AS a_write,
           vals[list_position(keys, 'cache_creation_5m_tokens')] AS a_write_5m,
           vals[list_position(keys, 'cache_creation_1h_tokens')] AS a_write_1h,
           vals[list_position(keys, 'cost_usd')] AS a_cost,
           vals[list_position(keys, 'duration_ms')] AS a_duration,
           vals[list_position(keys, 'ttft_ms')] AS a_ttft,
           CASE WHEN starts_with(body, 'claude_code.') THEN body[13:] END AS body_event,
           CASE WHEN starts_with(event_field, 'claude_code.') THEN event_field[13:] ELSE event_field END AS field_event,
           starts_with(body, 'claude_code.') OR starts_with(event_field, 'claude_code.')
               OR starts_with(scope, 'com.anthropic.claude_code') AS is_claude
    FROM records
), classified AS (
    SELECT *,
           coalesce(body_event, field_event, a_event) AS event,
           -- (false, not NULL, for a record without any name: it is counted as unnamed)
           coalesce(coalesce(body_event, field_event, a_event) = 'api_request', false) AS is_request,
           otlp_agent_event(a_event) AS agent_event
    FROM named
), numbers AS (
    SELECT *,
           coalesce(otlp_ts(otlp_ns(t_time)), otlp_ts(otlp_ns(t_observed)),
                    otlp_event_ts(a_event_ts)) AS ts,
           otlp_int(a_input) AS n_input, otlp_int(a_output) AS n_output, otlp_int(a_read) AS n_read,
           otlp_int(a_write) AS n_write, otlp_int(a_write_5m) AS n_write_5m, otlp_int(a_write_1h) AS n_write_1h,
           CASE WHEN NOT is_request THEN NULL
                WHEN otlp_bad_count(a_input) THEN 'input_tokens'
                WHEN otlp_bad_count(a_output) THEN 'output_tokens'
                WHEN otlp_bad_count(a_read) THEN 'cache_read_tokens'
                WHEN otlp_bad_count(a_write) THEN 'cache_creation_tokens'
                WHEN otlp_bad_count(a_write_5m) THEN 'cache_creation_5m_tokens'
                WHEN otlp_bad_count(a_write_1h) THEN 'cache_creation_1h_tokens'
           END AS bad_field
    FROM classified
), checked AS (
    SELECT *,
           CASE WHEN agent_event THEN NULL
                WHEN bad_field IS NOT NULL THEN bad_field
                WHEN is_request AND ts IS NULL THEN 'timeUnixNano' END AS reject_field
    FROM numbers
)
-- One pass over every record; only api_request rows are output (out), the others are counted
-- by kind.
SELECT line_no,
       CASE WHEN agent_event THEN NULL   -- read by otlp_agents_logs, on the lines that have one
            WHEN is_request THEN 'event:api_request'
            WHEN is_claude THEN 'event:' || coalesce(event, '(unnamed)')
            ELSE 'log:' || coalesce(field_event, a_event, '(unnamed)') END AS kind,
       is_request AND NOT agent_event AND reject_field IS NULL AS out,
       reject_field,
       CASE WHEN bad_field IS NOT NULL THEN 'not a token count: ' || CASE bad_field
                WHEN 'input_tokens' THEN a_input WHEN 'output_tokens' THEN a_output
                WHEN 'cache_read_tokens' THEN a_read WHEN 'cache_creation_tokens' THEN a_write
                WHEN 'cache_creation_5m_tokens' THEN a_write_5m ELSE a_write_1h END
            WHEN reject_field IS NOT NULL
                THEN 'api_request without a time (timeUnixNano, observedTimeUnixNano or event.timestamp)'
       END AS reject_reason,
       -- Without a request id, a hash of the normalized content: the same record sent twice
       -- (a collector retry), in any wire encoding, gets the same key.
       CASE WHEN is_request THEN coalesce(request_id, 'otlp:' || md5(concat_ws('|', session_id, epoch_us(ts),
                a_seq, a_prompt, model, n_input, n_output, n_read, n_write, n_write_5m, n_write_1h,
                a_query_source))) END AS request_key,
       request_id, CAST(NULL AS VARCHAR) AS message_id, ts, 'otlp-log' AS source, 'claude-code' AS agent,
       session_id,
       CASE WHEN otlp_qs(a_query_source) = 'subagent' THEN coalesce(a_agent_name, a_query_source)
            ELSE 'main' END AS thread_id,
       user_id, org_id, CAST(NULL AS VARCHAR) AS project, model, otlp_qs(a_query_source) AS query_source,
       coalesce(n_input, 0) AS input_tokens, coalesce(n_read, 0) AS cache_read_tokens,
       -- Newer clients split the write by TTL; a total beyond the split stays unknown.
       coalesce(n_write_5m, 0) AS cache_write_5m_tokens, coalesce(n_write_1h, 0) AS cache_write_1h_tokens,
       CASE WHEN n_write_5m IS NULL AND n_write_1h IS NULL THEN coalesce(n_write, 0)
            ELSE greatest(coalesce(n_write, 0) - coalesce(n_write_5m, 0) - coalesce(n_write_1h, 0), 0)
       END AS cache_write_unknown_tokens,
       coalesce(n_output, 0) AS output_tokens,
       otlp_num(a_cost) AS cost_usd, otlp_num(a_duration) AS duration_ms, otlp_num(a_ttft) AS ttft_ms,
       false AS is_sidechain,
       -- For every record: a CASE around list lambdas costs more (measured) than the work it skips.
       otlp_kv_attributes(keys, vals, ['session.id', 'user.id', 'organization.id',
                'model', 'request_id', 'input_tokens', 'output_tokens', 'cache_read_tokens',
                'cache_creation_tokens', 'cache_creation_5m_tokens', 'cache_creation_1h_tokens',
                'cost_usd', 'duration_ms', 'ttft_ms', 'event.name'], rmembers) AS attributes
FROM checked
-- Codex and Gemini CLI events (kind NULL) only mark their lines for otlp_agents_logs.
