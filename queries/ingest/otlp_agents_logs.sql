-- title: OTLP log records → Codex and Gemini CLI requests
-- description: reads view otlp_lines(line_no, line) (the lines otlp_logs marked) and
--   selects the rows of temp table otlp_agent_log_rows: one row per log record whose event.name
--   starts with codex. or gemini_cli. (otlp_agent_event; otlp_logs writes these only as kind-NULL
--   rows that mark their lines).
--   Codex codex.sse_event records with event.kind = response.completed and token counts, and
--   Gemini CLI gemini_cli.api_response records, become request rows (out) in disjoint buckets
--   (docs/agents.md): both APIs count cached tokens inside input. Every other record is counted
--   by kind. A clipped subtraction keeps the row (out) and names the field (reject_field) so
--   the parse reports it. The parser hands it only the lines where otlp_logs met such an event.

WITH parsed AS (
    SELECT line_no, otlp_logs_json(line) AS j
    FROM otlp_lines   -- only the lines where otlp_logs met such an event (kind NULL)
), resources AS (
    SELECT line_no, unnest(j.resourceLogs) AS rl FROM parsed
), scopes AS (
    SELECT line_no, coalesce(rl.resource.attributes, []) AS rattrs, unnest(rl.scopeLogs) AS sl FROM resources
), records AS (
    SELECT line_no, rattrs, unnest(sl.logRecords) AS r FROM scopes
), kv AS (
    SELECT line_no, rattrs, r.timeUnixNano AS t_time, r.observedTimeUnixNano AS t_observed,
           coalesce(r.attributes, []) AS attrs,
           list_transform(coalesce(r.attributes, []), lambda a: a.key) AS keys,
           list_transform(coalesce(r.attributes, []), lambda a: otlp_text(a.value)) AS vals,
           list_transform(rattrs, lambda a: a.key) AS rkeys
    FROM records
), named AS (
    SELECT *,
           vals[list_position(keys, 'event.name')] AS event,
           vals[list_position(keys, 'event.kind')] AS event_kind,
           vals[list_position(keys, 'event.timestamp')] AS a_event_ts,
           coalesce(vals[list_position(keys, 'conversation.id')], vals[list_position(keys, 'session.id')]) AS session_id,
           coalesce(vals[list_position(keys, 'user.account_id')], vals[list_position(keys, 'installation.id')],
                    vals[list_position(keys, 'user.email')]) AS user_id,
           vals[list_position(keys, 'model')] AS model,
           vals[list_position(keys, 'role')] AS a_role,
           vals[list_position(keys, 'input_token_count')] AS a_input,
           vals[list_position(keys, 'output_token_count')] AS a_output,
           -- Codex: cached_token_count; Gemini: cached_content_token_count
           coalesce(vals[list_position(keys, 'cached_token_count')],
                    vals[list_position(keys, 'cached_content_token_count')]) AS a_cached,
           vals[list_position(keys, 'cache_write_token_count')] AS a_written,
           vals[list_position(keys, 'reasoning_token_count')] AS a_reasoning,
           vals[list_position(keys, 'thoughts_token_count')] AS a_thoughts,
           vals[list_position(keys, 'tool_token_count')] AS a_tool,
           vals[list_position(keys, 'duration_ms')] AS a_duration,
           vals[list_position(keys, 'ttft_ms')] AS a_ttft
    FROM kv
    WHERE otlp_agent_event(vals[list_position(keys, 'event.name')])
), classified AS (
    SELECT *,
           CASE WHEN event = 'codex.sse_event' AND event_kind = 'response.completed' AND a_input IS NOT NULL
                    THEN 'codex'
                WHEN event = 'gemini_cli.api_response' AND a_input IS NOT NULL THEN 'gemini-cli' END AS agent
    FROM named
), numbers AS (
    SELECT *,
           coalesce(otlp_ts(otlp_ns(t_time)), otlp_ts(otlp_ns(t_observed)),
                    otlp_event_ts(a_event_ts)) AS ts,
           otlp_int(a_input) AS n_input, otlp_int(a_output) AS n_output, otlp_int(a_cached) AS n_cached,
           otlp_int(a_written) AS n_written, otlp_int(a_reasoning) AS n_reasoning,
           otlp_int(a_thoughts) AS n_thoughts, otlp_int(a_tool) AS n_tool,
           CASE WHEN agent IS NULL THEN NULL
                WHEN otlp_bad_count(a_input) THEN 'input_token_count'
                WHEN otlp_bad_count(a_output) THEN 'output_token_count'
                WHEN otlp_bad_count(a_cached) THEN
                    CASE agent WHEN 'codex' THEN 'cached_token_count' ELSE 'cached_content_token_count' END
                WHEN agent = 'codex' AND otlp_bad_count(a_written) THEN 'cache_write_token_count'
                WHEN agent = 'codex' AND otlp_bad_count(a_reasoning) THEN 'reasoning_token_count'
                WHEN agent = 'gemini-cli' AND otlp_bad_count(a_thoughts) THEN 'thoughts_token_count'
                WHEN agent = 'gemini-cli' AND otlp_bad_count(a_tool) THEN 'tool_token_count'
           END AS bad_field
    FROM classified
), checked AS (
    SELECT *,
           agent IS NOT NULL AND bad_field IS NULL AND ts IS NOT NULL AS usable,
           agent IS NOT NULL AND bad_field IS NULL AND ts IS NOT NULL
               AND agent_clipped(n_input, n_cached, CASE WHEN agent = 'codex' THEN n_written END) AS clipped
    FROM numbers
)
SELECT line_no,
       'event:' || event AS kind,
       usable AS out,
       CASE WHEN bad_field IS NOT NULL THEN bad_field
            WHEN agent IS NOT NULL AND ts IS NULL THEN 'timeUnixNano'
            WHEN clipped THEN 'input_token_count' END AS reject_field,
       CASE WHEN bad_field IS NOT NULL THEN 'not a token count: ' || CASE bad_field
                WHEN 'input_token_count' THEN a_input WHEN 'output_token_count' THEN a_output
                WHEN 'cache_write_token_count' THEN a_written WHEN 'reasoning_token_count' THEN a_reasoning
                WHEN 'thoughts_token_count' THEN a_thoughts WHEN 'tool_token_count' THEN a_tool
                ELSE a_cached END
            WHEN agent IS NOT NULL AND ts IS NULL
                THEN event || ' without a time (timeUnixNano, observedTimeUnixNano or event.timestamp)'
            WHEN clipped AND agent = 'codex'
                THEN agent_clip_note('input_token_count', n_input, 'cached_token_count + cache_write_token_count')
            WHEN clipped THEN agent_clip_note('input_token_count', n_input, 'cached_content_token_count')
       END AS reject_reason,
       CASE agent
           WHEN 'codex' THEN codex_request_key(session_id, n_input, n_cached, n_written, n_output, n_reasoning)
           WHEN 'gemini-cli' THEN gemini_request_key(session_id, n_input, n_cached, n_output, n_thoughts, n_tool)
       END AS request_key,
       CAST(NULL AS VARCHAR) AS request_id, CAST(NULL AS VARCHAR) AS message_id, ts,
       'otlp-log' AS source, agent, session_id, 'main' AS thread_id, user_id,
       CAST(NULL AS VARCHAR) AS org_id, CAST(NULL AS VARCHAR) AS project, model,
       CASE WHEN agent = 'gemini-cli' THEN otlp_qs(a_role) ELSE 'main' END AS query_source,
       CASE agent
           WHEN 'codex' THEN agent_uncached(n_input, n_cached, n_written)
           -- tool-use prompt tokens are input outside the prompt count
           ELSE agent_uncached(n_input, n_cached, 0) + coalesce(n_tool, 0) END AS input_tokens,
       coalesce(n_cached, 0) AS cache_read_tokens, 0 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens,
       CASE WHEN agent = 'codex' THEN coalesce(n_written, 0) ELSE 0 END AS cache_write_unknown_tokens,
       -- Codex output includes reasoning; Gemini bills thinking as output
       CASE agent WHEN 'codex' THEN coalesce(n_output, 0)
           ELSE coalesce(n_output, 0) + coalesce(n_thoughts, 0) END AS output_tokens,
       CAST(NULL AS DOUBLE) AS cost_usd, otlp_num(a_duration) AS duration_ms,
       otlp_num(a_ttft) AS ttft_ms, false AS is_sidechain,
       otlp_attributes(attrs, ['conversation.id', 'session.id', 'model', 'duration_ms', 'ttft_ms'],
                       rattrs, keys) AS attributes
FROM checked
