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
                   "source": "JSON", "timestamp": "VARCHAR",
                   "usage": {"input_tokens": "BIGINT", "cached_input_tokens": "BIGINT",
                       "cache_write_input_tokens": "BIGINT", "output_tokens": "BIGINT",
                       "reasoning_output_tokens": "BIGINT", "total_tokens": "BIGINT"},
                   "info": {"last_token_usage": {"input_tokens": "BIGINT", "cached_input_tokens": "BIGINT",
                       "cache_write_input_tokens": "BIGINT", "output_tokens": "BIGINT",
                       "reasoning_output_tokens": "BIGINT", "total_tokens": "BIGINT"}}}}')) AS j
    FROM cand
), typed AS (
    SELECT file_idx, lineno, unterminated, j,
           CASE WHEN j.type = 'token_usage_record' THEN j.payload.usage
                WHEN j.type = 'event_msg' AND j.payload.type = 'token_count' THEN j.payload.info.last_token_usage
           END AS u,
           coalesce(j.type = 'token_usage_record' OR (j.type = 'event_msg' AND j.payload.type = 'token_count'),
                    false) AS usage_line
    FROM parsed
)
SELECT file_idx, lineno, j, u,
       CASE
           WHEN j IS NULL AND unterminated THEN 'torn_last_line'
           WHEN j IS NULL THEN 'malformed'
           WHEN j.type = 'session_meta' THEN 'session_meta'
           -- rollouts of 2025 began with a bare {"id", "timestamp", "instructions"} line
           WHEN lineno = 1 AND j.type IS NULL AND j.id IS NOT NULL THEN 'session_meta'
           WHEN j.type = 'turn_context' THEN 'turn_context'
           WHEN NOT usage_line THEN 'other'
           -- token_count events without info carry only rate limits
           WHEN u IS NULL THEN coalesce(j.payload.type, j.type) || '_without_usage'
           WHEN least(u.input_tokens, u.cached_input_tokens, u.cache_write_input_tokens, u.output_tokens,
                      u.reasoning_output_tokens) < 0 THEN 'negative'
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
    SELECT l.file_idx, l.lineno, l.j, l.u, f.path,
           coalesce(m.meta_session, j.payload.session_id,
                    regexp_extract(f.path, '([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl(\.gz)?$', 1)
                   ) AS session_id,
           m.cwd, m.cli_version, m.originator, m.model_provider, m.parent_thread
    FROM cx_lines l JOIN cx_raw f USING (file_idx) LEFT JOIN meta m USING (file_idx)
    WHERE l.kind = 'usage'
), keyed AS (
    SELECT u.*, c.model,
           codex_request_key(nullif(u.session_id, ''), u.u.input_tokens, u.u.cached_input_tokens,
                             u.u.cache_write_input_tokens, u.u.output_tokens, u.u.reasoning_output_tokens) AS request_key
    FROM usage u ASOF LEFT JOIN ctx c ON u.file_idx = c.file_idx AND u.lineno > c.lineno
)
SELECT request_key,
       -- the record with the response id wins over the token_count of the same response
       max(j.payload.response_id) OVER (PARTITION BY request_key) AS request_id,
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
QUALIFY row_number() OVER (PARTITION BY request_key
                           ORDER BY j.type = 'token_usage_record' DESC, file_idx, lineno) = 1
ORDER BY file_idx, lineno;
