-- title: Codex rollout files: one row per model response
-- description: reads cx_raw(file_idx, path, content), whole rollout-*.jsonl files, and builds
--   cx_lines (the parsed candidate lines and what each is) and cx_requests (REQUEST_SCHEMA
--   columns). A response's usage is the per-response delta: payload.info.last_token_usage of
--   an event_msg token_count (never total_token_usage, the running sum), or payload.usage of a
--   token_usage_record (newer builds write both for one response; the record adds the response
--   id). Copies of one response (both records, or a token_count some versions write twice)
--   share a content key (codex_request_key) and count once. The model is the one of the last
--   turn_context before the usage line; the session id comes from session_meta (else the
--   file name). Only lines containing one of the record type tokens are parsed.

CREATE OR REPLACE TEMP TABLE cx_lines AS
WITH sp AS (
    SELECT file_idx, string_split(content, chr(10)) AS ls FROM cx_raw
), ln AS (
    SELECT file_idx, unnest(ls) AS line, unnest(range(1, len(ls) + 1)) AS lineno, len(ls) AS n FROM sp
), cand AS (
    SELECT * FROM ln
    WHERE contains(line, '"token_count"') OR contains(line, '"token_usage_record"')
       OR contains(line, '"turn_context"') OR contains(line, '"session_meta"')
       OR (lineno = 1 AND trim(line) <> '')
), parsed AS (
    SELECT file_idx, lineno, lineno = n AS unterminated,
           try(json_transform(line, '{
               "timestamp": "VARCHAR", "type": "VARCHAR", "id": "VARCHAR", "instructions": "VARCHAR",
               "payload": {"type": "VARCHAR", "id": "VARCHAR", "session_id": "VARCHAR",
                   "response_id": "VARCHAR", "turn_id": "VARCHAR", "model": "VARCHAR", "cwd": "VARCHAR",
                   "cli_version": "VARCHAR", "originator": "VARCHAR", "model_provider": "VARCHAR",
                   "source": "JSON", "timestamp": "VARCHAR", "usage": "JSON",
                   "info": {"last_token_usage": "JSON", "total_token_usage": "JSON"}}}')) AS j
    FROM cand
), usage_json AS (
    SELECT file_idx, lineno, unterminated, j,
           CASE WHEN j.type = 'token_usage_record' THEN 'payload.usage.'
                WHEN j.type = 'event_msg' AND j.payload.type = 'token_count' THEN 'payload.info.last_token_usage.'
           END AS at_field,
           CASE WHEN j.type = 'token_usage_record' THEN j.payload.usage
                WHEN j.type = 'event_msg' AND j.payload.type = 'token_count' THEN j.payload.info.last_token_usage
           END AS uj
    FROM parsed
), typed AS (
    -- The counts as JSON texts: one present but not a whole number from 0 to 2^63-1 (text, null,
    -- NaN, 1e400, an array or object, negative) rejects the line, naming the first such field.
    SELECT *, list_transform(c, lambda x: TRY_CAST(x->>'$' AS BIGINT)) AS n,
           list_position(list_transform(c, lambda x: x IS NOT NULL
               AND coalesce(TRY_CAST(x->>'$' AS BIGINT) < 0, true)), true) AS bad
    FROM (SELECT *, at_field IS NOT NULL AS usage_line,
                 json_extract(uj, ['$.input_tokens', '$.cached_input_tokens', '$.cache_write_input_tokens',
                                   '$.output_tokens', '$.reasoning_output_tokens']) AS c
          FROM usage_json)
)
SELECT file_idx, lineno, j,
       CASE WHEN uj IS NOT NULL THEN {'input_tokens': n[1], 'cached_input_tokens': n[2],
           'cache_write_input_tokens': n[3], 'output_tokens': n[4], 'reasoning_output_tokens': n[5]} END AS u,
       -- a token_count's running total: it grows by the delta with each response, not with a copy
       TRY_CAST(j.payload.info.total_token_usage->>'$.input_tokens' AS BIGINT) AS total_input,
       TRY_CAST(j.payload.info.total_token_usage->>'$.output_tokens' AS BIGINT) AS total_output,
       CASE WHEN bad > 0 THEN at_field || ['input_tokens', 'cached_input_tokens', 'cache_write_input_tokens',
           'output_tokens', 'reasoning_output_tokens'][bad] END AS bad_field,
       CASE WHEN bad > 0 THEN left(coalesce(c[bad]::VARCHAR, 'null'), 40) END AS bad_value,
       CASE
           WHEN j IS NULL AND unterminated THEN 'torn_last_line'
           WHEN j IS NULL THEN 'malformed'
           WHEN j.type = 'session_meta' THEN 'session_meta'
           -- rollouts of 2025 began with a bare {"id", "timestamp", "instructions"} line
           WHEN lineno = 1 AND j.type IS NULL AND j.id IS NOT NULL THEN 'session_meta'
           WHEN j.type = 'turn_context' THEN 'turn_context'
           WHEN NOT usage_line THEN 'other'
           -- token_count events without info carry only rate limits
           WHEN uj IS NULL THEN coalesce(j.payload.type, j.type) || '_without_usage'
           WHEN bad > 0 THEN 'bad_count'
           WHEN try_cast(j.timestamp AS TIMESTAMPTZ) IS NULL THEN 'bad_timestamp'
           ELSE 'usage'
       END AS kind
FROM typed;

CREATE OR REPLACE TEMP TABLE cx_requests AS
WITH meta AS (
    SELECT file_idx, coalesce(j.payload.id, j.id) AS meta_session, j.payload.cwd AS cwd,
           j.payload.cli_version AS cli_version, j.payload.originator AS originator,
           j.payload.model_provider AS model_provider,
           json_extract_string(j.payload.source, '$.subagent.thread_spawn.parent_thread_id') AS parent_thread
    FROM cx_lines WHERE kind = 'session_meta'
    QUALIFY row_number() OVER (PARTITION BY file_idx ORDER BY lineno) = 1
), ctx AS (
    SELECT file_idx, lineno, j.payload.model AS model FROM cx_lines
    WHERE kind = 'turn_context' AND j.payload.model IS NOT NULL
), usage AS (
    SELECT l.file_idx, l.lineno, l.j, l.u, l.total_input, l.total_output, f.path,
           coalesce(m.meta_session, j.payload.session_id,
                    regexp_extract(f.path, '([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl(\.gz)?$', 1)
                   ) AS session_id,
           m.cwd, m.cli_version, m.originator, m.model_provider, m.parent_thread
    FROM cx_lines l JOIN cx_raw f USING (file_idx) LEFT JOIN meta m USING (file_idx)
    WHERE l.kind = 'usage'
), copies AS (
    -- Which usage lines are one response, by their place in the file: a token_count right after
    -- a token_usage_record is that record's copy, and a token_count right after another with the
    -- same delta is a copy written twice unless its running total grew by that delta (then it is
    -- the next response, which reported the same counts); any other usage line is the next
    -- response.
    SELECT *, sum(CASE WHEN p.type = 'token_usage_record' AND j.type = 'event_msg'
                         OR (p.type = 'event_msg' AND j.type = 'event_msg' AND p.u = u
                             AND NOT coalesce(total_input = p.total_input + u.input_tokens
                                              AND total_output = p.total_output + u.output_tokens, false))
                       THEN 0 ELSE 1 END) OVER (PARTITION BY file_idx ORDER BY lineno) AS response_no
    FROM (SELECT *, lag({'type': j.type, 'u': u, 'total_input': total_input, 'total_output': total_output})
                        OVER (PARTITION BY file_idx ORDER BY lineno) AS p
          FROM usage)
), responses AS (
    -- one line per response (the record, which names the response, over its token_count)
    SELECT *, max(j.payload.response_id) OVER (PARTITION BY file_idx, response_no) AS response_id
    FROM copies
    QUALIFY row_number() OVER (PARTITION BY file_idx, response_no
                               ORDER BY j.type = 'token_usage_record' DESC, lineno) = 1
), keyed AS (
    -- The content key every Codex source computes; the n-th later response of the session with
    -- the same counts adds n to it.
    SELECT u.*, c.model,
           codex_request_key(nullif(u.session_id, ''), u.u.input_tokens, u.u.cached_input_tokens,
                             u.u.cache_write_input_tokens, u.u.output_tokens, u.u.reasoning_output_tokens,
                             nth := row_number() OVER (PARTITION BY u.session_id, u.u
                                 ORDER BY try_cast(u.j.timestamp AS TIMESTAMPTZ), u.file_idx, u.lineno) - 1
                             ) AS request_key
    FROM responses u ASOF LEFT JOIN ctx c ON u.file_idx = c.file_idx AND u.lineno > c.lineno
)
SELECT request_key,
       response_id AS request_id,
       CAST(NULL AS VARCHAR) AS message_id,
       CAST(CAST(j.timestamp AS TIMESTAMPTZ) AS TIMESTAMP) AS ts,
       'codex-rollout' AS source, 'codex' AS agent, session_id,
       CASE WHEN parent_thread IS NOT NULL THEN session_id ELSE 'main' END AS thread_id,
       CAST(NULL AS VARCHAR) AS user_id, CAST(NULL AS VARCHAR) AS org_id, cwd AS project, model,
       CASE WHEN parent_thread IS NOT NULL THEN 'subagent' ELSE 'main' END AS query_source,
       agent_uncached(u.input_tokens, u.cached_input_tokens, u.cache_write_input_tokens) AS input_tokens,
       coalesce(u.cached_input_tokens, 0) AS cache_read_tokens,
       0 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens,
       coalesce(u.cache_write_input_tokens, 0) AS cache_write_unknown_tokens,
       coalesce(u.output_tokens, 0) AS output_tokens,
       CAST(NULL AS DOUBLE) AS cost_usd, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS DOUBLE) AS ttft_ms,
       false AS is_sidechain,
       CAST(json_object('input_tokens_total', u.input_tokens, 'reasoning_output_tokens', u.reasoning_output_tokens,
                        'turn_id', j.payload.turn_id, 'cli_version', cli_version, 'originator', originator,
                        'model_provider', model_provider, 'parent_thread_id', parent_thread,
                        'record', j.type) AS VARCHAR) AS attributes,
       path || ':' || lineno AS ingested_from,
       file_idx, lineno,
       agent_clipped(u.input_tokens, u.cached_input_tokens, u.cache_write_input_tokens) AS clipped,
       u.input_tokens AS raw_input, u.cached_input_tokens AS raw_cached, u.cache_write_input_tokens AS raw_write
FROM keyed
-- the same session in two files of the batch: one copy
QUALIFY row_number() OVER (PARTITION BY request_key
                           ORDER BY j.type = 'token_usage_record' DESC, file_idx, lineno) = 1
ORDER BY file_idx, lineno;
