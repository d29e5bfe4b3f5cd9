-- title: Gemini CLI chat logs: one row per model response
-- description: reads gm_raw(file_idx, path, content), whole chat files under
--   ~/.gemini/tmp/<project>/chats/, and builds gm_items (every candidate record and what it is)
--   and gm_requests (REQUEST_SCHEMA columns). Two layouts: session-*.jsonl (a header line with
--   sessionId/projectHash, one line per message, "$set" patch lines that may repeat messages)
--   and session-*.json (one object whose messages array holds every message). A gemini message
--   carries tokens{input, output, cached, thoughts, tool, total}; input is the API's
--   promptTokenCount and includes cached. A message written several times (before and after
--   its tool calls, or repeated in a "$set") counts once: the copy with the largest total.
--   A JSON array of prompt-log entries (logs.json) is only counted.

CREATE OR REPLACE TEMP TABLE gm_items AS
WITH files AS (
    SELECT file_idx, content, json_valid(content) AS whole FROM gm_raw
), whole_doc AS (
    SELECT file_idx, CAST(content AS JSON) AS doc FROM files WHERE whole
), split AS (
    SELECT file_idx, string_split(content, chr(10)) AS ls FROM files WHERE NOT whole
), ln AS (
    SELECT file_idx, unnest(ls) AS line, unnest(range(1, len(ls) + 1)) AS lineno, len(ls) AS n FROM split
), cand AS (
    SELECT file_idx, lineno, lineno = n AS unterminated, try(CAST(line AS JSON)) AS doc FROM ln
    WHERE contains(line, '"tokens"') OR contains(line, '"gemini"') OR contains(line, '"sessionId"')
       OR contains(line, '"$set"')
), docs AS (
    -- A whole-file document is "line" 1 of its file.
    SELECT file_idx, 1 AS lineno, false AS unterminated, doc, true AS whole FROM whole_doc
    UNION ALL
    SELECT file_idx, lineno, unterminated, doc, false FROM cand
), shaped AS (
    SELECT *, json_type(doc) AS t,
           coalesce(json_extract_string(doc, '$.sessionId'),
                    json_extract_string(doc, '$."$set".sessionId')) AS session_id,
           json_extract_string(doc, '$.projectHash') AS project_hash,
           json_extract_string(doc, '$.kind') AS chat_kind,
           CASE WHEN json_type(doc, '$.messages') = 'ARRAY' THEN json_extract(doc, '$.messages')
                WHEN json_type(doc, '$."$set".messages') = 'ARRAY' THEN json_extract(doc, '$."$set".messages')
                WHEN json_extract_string(doc, '$.type') IS NOT NULL AND json_type(doc, '$.id') IS NOT NULL
                    THEN json_array(doc) END AS msgs
    FROM docs
), messages AS (
    SELECT file_idx, lineno, unnest(CAST(msgs AS JSON[])) AS m FROM shaped WHERE msgs IS NOT NULL
), fields AS (
    SELECT file_idx, lineno, json_transform(m, '{"id": "VARCHAR", "timestamp": "VARCHAR", "type": "VARCHAR",
               "model": "VARCHAR", "tokens": "JSON"}') AS t
    FROM messages
), counted AS (
    -- The counts as JSON texts: one present but not a whole number from 0 to 2^63-1 (text, null,
    -- NaN, 1e400, an array or object, negative) rejects the message, naming the first such field.
    SELECT *, list_transform(c, lambda x: TRY_CAST(x->>'$' AS BIGINT)) AS n,
           list_position(list_transform(c, lambda x: x IS NOT NULL
               AND coalesce(TRY_CAST(x->>'$' AS BIGINT) < 0, true)), true) AS bad
    FROM (SELECT *, json_extract(t.tokens, ['$.input', '$.output', '$.cached', '$.thoughts', '$.tool', '$.total']) AS c
          FROM fields)
), typed AS (
    SELECT file_idx, lineno,
           {'id': t.id, 'timestamp': t.timestamp, 'type': t.type, 'model': t.model,
            'tokens': CASE WHEN t.tokens IS NOT NULL THEN {'input': n[1], 'output': n[2], 'cached': n[3],
                'thoughts': n[4], 'tool': n[5], 'total': n[6]} END} AS msg,
           CASE WHEN bad > 0 THEN 'tokens.' || ['input', 'output', 'cached', 'thoughts', 'tool', 'total'][bad] END AS bad_field,
           CASE WHEN bad > 0 THEN left(c[bad]::VARCHAR, 40) END AS bad_value
    FROM counted
)
-- One row per file-level record (sessions, rejects, prompt logs) ...
SELECT file_idx, lineno,
       CASE WHEN doc IS NULL AND unterminated THEN 'torn_last_line'
            WHEN doc IS NULL THEN 'malformed'
            WHEN whole AND t = 'ARRAY' THEN 'prompt_log'
            WHEN session_id IS NOT NULL THEN 'session'
            ELSE 'other' END AS kind,
       CASE WHEN whole AND t = 'ARRAY' THEN json_array_length(doc) ELSE 1 END AS n,
       session_id, project_hash, chat_kind, CAST(NULL AS JSON) AS msg_json,
       CAST(NULL AS VARCHAR) AS bad_field, CAST(NULL AS VARCHAR) AS bad_value,
       NULL::STRUCT(id VARCHAR, "timestamp" VARCHAR, "type" VARCHAR, model VARCHAR,
                    tokens STRUCT(input BIGINT, output BIGINT, cached BIGINT, thoughts BIGINT, tool BIGINT,
                                  total BIGINT)) AS msg
FROM shaped
WHERE msgs IS NULL OR session_id IS NOT NULL
UNION ALL BY NAME
-- ... and one per message.
SELECT file_idx, lineno,
       CASE WHEN msg.type IS DISTINCT FROM 'gemini' THEN 'other'
            WHEN msg.tokens IS NULL THEN 'gemini_without_tokens'
            WHEN bad_field IS NOT NULL THEN 'bad_count'
            WHEN try_cast(msg.timestamp AS TIMESTAMPTZ) IS NULL THEN 'bad_timestamp'
            ELSE 'usage' END AS kind,
       1 AS n, msg, bad_field, bad_value
FROM typed;

CREATE OR REPLACE TEMP TABLE gm_requests AS
WITH sess AS (
    SELECT file_idx, first(session_id ORDER BY lineno) AS session_id,
           first(project_hash ORDER BY lineno) FILTER (WHERE project_hash IS NOT NULL) AS project_hash,
           first(chat_kind ORDER BY lineno) FILTER (WHERE chat_kind IS NOT NULL) AS chat_kind
    FROM gm_items WHERE kind = 'session' GROUP BY file_idx
), usage AS (
    SELECT i.file_idx, i.lineno, i.msg, f.path, s.project_hash, s.chat_kind,
           coalesce(s.session_id, regexp_extract(f.path, 'session-[^/]*-([0-9a-f]{8})\.jsonl?(\.gz)?$', 1)) AS session_id,
           -- the folder above chats/: the project's name (or its hash in older versions)
           regexp_extract(f.path, '([^/]+)/chats/[^/]+$', 1) AS folder
    FROM gm_items i JOIN gm_raw f USING (file_idx) LEFT JOIN sess s USING (file_idx)
    WHERE i.kind = 'usage'
), best AS (
    -- one copy per message: the largest total, then the last written
    SELECT * FROM usage
    QUALIFY row_number() OVER (PARTITION BY session_id, coalesce(msg.id, file_idx || ':' || lineno)
                               ORDER BY msg.tokens.total DESC NULLS LAST, file_idx DESC, lineno DESC) = 1
), keyed AS (
    -- The content key every Gemini source computes; the n-th later message of the session with
    -- the same counts (another message id) adds n to it.
    SELECT *, gemini_request_key(nullif(session_id, ''), msg.tokens.input, msg.tokens.cached,
                                 msg.tokens.output, msg.tokens.thoughts, msg.tokens.tool,
                                 nth := row_number() OVER (
                                     PARTITION BY session_id, msg.tokens.input, msg.tokens.cached,
                                                  msg.tokens.output, msg.tokens.thoughts, msg.tokens.tool
                                     ORDER BY try_cast(msg.timestamp AS TIMESTAMPTZ), file_idx, lineno) - 1
                                 ) AS request_key
    FROM best
)
SELECT request_key, CAST(NULL AS VARCHAR) AS request_id, msg.id AS message_id,
       CAST(CAST(msg.timestamp AS TIMESTAMPTZ) AS TIMESTAMP) AS ts,
       'gemini-chat' AS source, 'gemini-cli' AS agent, session_id,
       'main' AS thread_id, CAST(NULL AS VARCHAR) AS user_id, CAST(NULL AS VARCHAR) AS org_id,
       folder AS project, msg.model AS model,
       CASE WHEN chat_kind IS NULL OR chat_kind = 'main' THEN 'main' ELSE 'subagent' END AS query_source,
       -- tool-use prompt tokens are input outside the prompt count: uncached input too
       agent_uncached(msg.tokens.input, msg.tokens.cached, 0) + coalesce(msg.tokens.tool, 0) AS input_tokens,
       coalesce(msg.tokens.cached, 0) AS cache_read_tokens,
       0 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens, 0 AS cache_write_unknown_tokens,
       -- thinking tokens are billed as output
       coalesce(msg.tokens.output, 0) + coalesce(msg.tokens.thoughts, 0) AS output_tokens,
       CAST(NULL AS DOUBLE) AS cost_usd, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS DOUBLE) AS ttft_ms,
       false AS is_sidechain,
       CAST(json_object('prompt_tokens', msg.tokens.input, 'thoughts_tokens', msg.tokens.thoughts,
                        'tool_tokens', msg.tokens.tool, 'total_tokens', msg.tokens.total,
                        'project_hash', project_hash, 'chat_kind', chat_kind) AS VARCHAR) AS attributes,
       path || ':' || lineno AS ingested_from,
       file_idx, lineno, agent_clipped(msg.tokens.input, msg.tokens.cached, 0) AS clipped,
       msg.tokens.input AS raw_input, msg.tokens.cached AS raw_cached
FROM keyed
QUALIFY row_number() OVER (PARTITION BY request_key ORDER BY file_idx, lineno) = 1
ORDER BY file_idx, lineno;
