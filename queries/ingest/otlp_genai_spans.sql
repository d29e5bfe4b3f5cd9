-- title: OTLP spans → GenAI, OpenLLMetry, OpenInference and Codex requests
-- description: reads view otlp_lines(line_no, line) (valid lines that carry resourceSpans) and
--   selects the rows of temp table otlp_genai_span_rows: one row per span with token usage in
--   any spelling (otlp_usage_span; otlp_spans leaves these out). A generation span becomes a
--   request row (out) in disjoint buckets: its input count includes the cache read and the
--   cache write (docs/agents.md); agent, invoke/tool/embedding spans and non-LLM OpenInference
--   spans, which repeat or are not generations, are counted by name. A span of a known agent
--   (service.name codex*) counts as that agent, keyed by the content key its events share when
--   its trace names the session. Session and model fall back to those of other spans of the
--   same trace in the input. A clipped subtraction keeps the row and names the field.

WITH parsed AS (
    SELECT line_no, from_json(line, '{"resourceSpans": [{
        "resource": {"attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
            "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
            "arrayValue": "JSON", "kvlistValue": "JSON"}}]},
        "scopeSpans": [{
            "spans": [{
                "traceId": "VARCHAR", "spanId": "VARCHAR",
                "name": "VARCHAR", "startTimeUnixNano": "VARCHAR", "endTimeUnixNano": "VARCHAR",
                "attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR",
                    "intValue": "VARCHAR", "doubleValue": "VARCHAR", "boolValue": "VARCHAR",
                    "arrayValue": "JSON", "kvlistValue": "JSON"}}]}]}]}]}') AS j
    FROM otlp_lines
    -- usage in any spelling, or a Codex span that may name its trace's session
    WHERE contains(line, 'gen_ai.usage.') OR contains(line, 'llm.usage.')
       OR contains(line, 'llm.token_count.') OR contains(line, 'codex.')
), resources AS (
    SELECT line_no, unnest(j.resourceSpans) AS rs FROM parsed
), scopes AS (
    SELECT line_no, coalesce(rs.resource.attributes, []) AS rattrs, unnest(rs.scopeSpans) AS ss FROM resources
), spans AS (
    SELECT line_no, rattrs, unnest(ss.spans) AS s FROM scopes
), kv AS (
    SELECT line_no, rattrs, s.name AS name, nullif(lower(s.traceId), '') AS trace_id,
           nullif(lower(s.spanId), '') AS span_id, s.startTimeUnixNano AS t_start, s.endTimeUnixNano AS t_end,
           coalesce(s.attributes, []) AS attrs,
           list_transform(coalesce(s.attributes, []), lambda a: a.key) AS keys,
           list_transform(coalesce(s.attributes, []), lambda a: otlp_text(a.value)) AS vals,
           list_transform(rattrs, lambda a: a.key) AS rkeys,
           list_transform(rattrs, lambda a: otlp_text(a.value)) AS rvals
    FROM spans
), named AS (
    SELECT *,
           otlp_usage_span(name, keys) AS has_usage,
           agent_of_service(rvals[list_position(rkeys, 'service.name')]) AS known_agent,
           vals[list_position(keys, 'gen_ai.operation.name')] AS op,
           vals[list_position(keys, 'openinference.span.kind')] AS oi_kind,
           -- the span's own session, in the conventions' spellings
           coalesce(vals[list_position(keys, 'gen_ai.conversation.id')], vals[list_position(keys, 'session.id')],
                    vals[list_position(keys, 'conversation.id')],
                    vals[list_position(keys, 'traceloop.association.properties.session_id')],
                    -- Codex's turn span: the conversation id as a string thread.id (beside the
                    -- integer thread.id every span has: the OS thread)
                    list_filter(attrs, lambda a: a.key = 'thread.id' AND a.value.stringValue IS NOT NULL)[1].value.stringValue
                   ) AS own_session,
           coalesce(vals[list_position(keys, 'gen_ai.response.model')], vals[list_position(keys, 'gen_ai.request.model')],
                    vals[list_position(keys, 'llm.model_name')], vals[list_position(keys, 'llm.request.model')],
                    vals[list_position(keys, 'model')]) AS own_model,
           coalesce(vals[list_position(keys, 'gen_ai.provider.name')], vals[list_position(keys, 'gen_ai.system')],
                    vals[list_position(keys, 'llm.provider')], vals[list_position(keys, 'llm.system')]) AS provider,
           nullif(vals[list_position(keys, 'gen_ai.response.id')], '') AS response_id,
           vals[list_position(keys, 'user.id')] AS user_id,
           coalesce(vals[list_position(keys, 'gen_ai.usage.input_tokens')], vals[list_position(keys, 'gen_ai.usage.prompt_tokens')],
                    vals[list_position(keys, 'llm.usage.prompt_tokens')], vals[list_position(keys, 'llm.token_count.prompt')]) AS a_input,
           coalesce(vals[list_position(keys, 'gen_ai.usage.output_tokens')], vals[list_position(keys, 'gen_ai.usage.completion_tokens')],
                    vals[list_position(keys, 'llm.usage.completion_tokens')], vals[list_position(keys, 'llm.token_count.completion')]) AS a_output,
           coalesce(vals[list_position(keys, 'gen_ai.usage.cache_read.input_tokens')],
                    vals[list_position(keys, 'gen_ai.usage.cache_read_input_tokens')],
                    vals[list_position(keys, 'llm.usage.cache_read_input_tokens')],
                    vals[list_position(keys, 'llm.token_count.prompt_details.cache_read')]) AS a_read,
           coalesce(vals[list_position(keys, 'gen_ai.usage.cache_creation.input_tokens')],
                    vals[list_position(keys, 'gen_ai.usage.cache_write.input_tokens')],
                    vals[list_position(keys, 'gen_ai.usage.cache_creation_input_tokens')],
                    vals[list_position(keys, 'llm.usage.cache_creation_input_tokens')],
                    vals[list_position(keys, 'llm.token_count.prompt_details.cache_write')]) AS a_write,
           coalesce(vals[list_position(keys, 'gen_ai.usage.reasoning.output_tokens')],
                    vals[list_position(keys, 'codex.usage.reasoning_output_tokens')],
                    vals[list_position(keys, 'llm.token_count.completion_details.reasoning')]) AS a_reasoning,
           otlp_ns(t_start) AS start_ns, otlp_ns(t_end) AS end_ns
    FROM kv
), traced AS (
    -- what the other spans of the same trace (in this input) say
    SELECT *,
           coalesce(own_session, max(own_session) OVER (PARTITION BY trace_id)) AS trace_session,
           coalesce(own_model, max(own_model) OVER (PARTITION BY trace_id)) AS model,
           CASE WHEN list_has_any(keys, ['openinference.span.kind']) OR list_has_any(keys, [
                    'llm.token_count.prompt', 'llm.token_count.completion']) THEN 'openinference'
                ELSE 'genai' END AS convention
    FROM named
), classified AS (
    SELECT *,
           has_usage AND coalesce(op NOT IN ('invoke_agent', 'create_agent', 'execute_tool', 'embeddings'), true)
               AND coalesce(oi_kind = 'LLM', true) AS is_request,
           coalesce(known_agent, convention) AS agent,
           otlp_int(a_input) AS n_input, otlp_int(a_output) AS n_output, otlp_int(a_read) AS n_read,
           otlp_int(a_write) AS n_write, otlp_int(a_reasoning) AS n_reasoning
    FROM traced
    WHERE has_usage
), checked AS (
    SELECT *,
           CASE WHEN NOT is_request THEN NULL
                WHEN otlp_bad_count(a_input) THEN 'input tokens'
                WHEN otlp_bad_count(a_output) THEN 'output tokens'
                WHEN otlp_bad_count(a_read) THEN 'cache read tokens'
                WHEN otlp_bad_count(a_write) THEN 'cache write tokens'
                WHEN start_ns IS NULL THEN 'startTimeUnixNano'
           END AS bad_field
    FROM classified
), final AS (
    SELECT *,
           is_request AND bad_field IS NULL AS usable,
           is_request AND bad_field IS NULL AND agent_clipped(n_input, n_read, n_write) AS clipped,
           -- the name of the input attribute the span used, for messages
           CASE WHEN list_has_any(keys, ['gen_ai.usage.input_tokens']) THEN 'gen_ai.usage.input_tokens'
                WHEN list_has_any(keys, ['gen_ai.usage.prompt_tokens']) THEN 'gen_ai.usage.prompt_tokens'
                WHEN list_has_any(keys, ['llm.usage.prompt_tokens']) THEN 'llm.usage.prompt_tokens'
                ELSE 'llm.token_count.prompt' END AS input_name
    FROM checked
)
SELECT line_no,
       'span:' || coalesce(name, '(unnamed)') AS kind,
       usable AS out,
       CASE WHEN bad_field = 'startTimeUnixNano' THEN bad_field
            WHEN bad_field IS NOT NULL THEN input_name   -- refined in the reason
            WHEN clipped THEN input_name END AS reject_field,
       CASE WHEN bad_field = 'startTimeUnixNano' THEN 'span with token usage but no start time'
            WHEN bad_field IS NOT NULL THEN 'not a token count (' || bad_field || '): ' || CASE bad_field
                WHEN 'input tokens' THEN a_input WHEN 'output tokens' THEN a_output
                WHEN 'cache read tokens' THEN a_read ELSE a_write END
            WHEN clipped THEN agent_clip_note(input_name, n_input, 'its cache read + cache write')
       END AS reject_reason,
       CASE WHEN known_agent = 'codex' AND trace_session IS NOT NULL
                THEN codex_request_key(trace_session, n_input, n_read, n_write, n_output, n_reasoning)
            WHEN span_id IS NOT NULL THEN 'span:' || coalesce(trace_id, '') || ':' || span_id
            ELSE 'span:' || md5(concat_ws('|', name, start_ns, end_ns, a_input, a_output, a_read, a_write))
       END AS request_key,
       response_id AS request_id, CAST(NULL AS VARCHAR) AS message_id, otlp_ts(start_ns) AS ts,
       'otlp-span' AS source, agent,
       coalesce(trace_session, 'trace:' || trace_id) AS session_id, 'main' AS thread_id, user_id,
       CAST(NULL AS VARCHAR) AS org_id, CAST(NULL AS VARCHAR) AS project, model, 'main' AS query_source,
       agent_uncached(n_input, n_read, n_write) AS input_tokens,
       coalesce(n_read, 0) AS cache_read_tokens, 0 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens,
       coalesce(n_write, 0) AS cache_write_unknown_tokens, coalesce(n_output, 0) AS output_tokens,
       CAST(NULL AS DOUBLE) AS cost_usd, (end_ns - start_ns) / 1e6 AS duration_ms,
       CAST(NULL AS DOUBLE) AS ttft_ms, false AS is_sidechain,
       -- the convention and provider stay visible beside the attributes
       '{"convention":' || to_json(convention) || coalesce(',"provider":' || to_json(provider), '')
           || coalesce(',"trace_id":' || to_json(trace_id), '') || coalesce(',"span_id":' || to_json(span_id), '')
           || coalesce(',' || nullif(otlp_members(attrs, ['gen_ai.conversation.id', 'session.id']), ''), '')
           || coalesce(',' || nullif(otlp_members(rattrs, keys), ''), '') || '}' AS attributes
FROM final
