-- title: Claude Code transcripts: the candidate lines of a group of files, parsed
-- description: reads tx_raw(file_idx, content), whole transcript files, and builds tx_part: the
--   lines that contain the JSON token "assistant" or "compact_boundary" (matched whatever the
--   whitespace around it), their 1-based line numbers, the parsed fields and what each line is
--   (a usable response line, or why not). Parsing only these lines instead of every line is
--   most of the speed: user, progress and snapshot records hold most of the bytes. The parser
--   runs this on one connection per group of files, in parallel.

-- Candidate lines parsed, and what each is: a usable response line, or why not.
CREATE OR REPLACE TEMP TABLE tx_part AS
WITH sp AS (
    SELECT file_idx, string_split(content, chr(10)) AS ls FROM tx_raw
), ln AS (
    SELECT file_idx, unnest(ls) AS line, unnest(range(1, len(ls) + 1)) AS lineno, len(ls) AS n FROM sp
), parsed AS (
    SELECT file_idx, lineno,
           lineno = n AS unterminated,   -- the piece after the last newline: a line still being written
           try(json_transform(line, '{
               "type": "VARCHAR", "subtype": "VARCHAR", "uuid": "VARCHAR", "timestamp": "VARCHAR",
               "sessionId": "VARCHAR", "agentId": "VARCHAR", "requestId": "VARCHAR", "isSidechain": "BOOLEAN",
               "isApiErrorMessage": "BOOLEAN", "cwd": "VARCHAR", "version": "VARCHAR", "gitBranch": "VARCHAR",
               "entrypoint": "VARCHAR", "compactMetadata": {"preTokens": "BIGINT", "trigger": "VARCHAR"},
               "message": {"id": "VARCHAR", "model": "VARCHAR", "stop_reason": "VARCHAR",
                   "usage": {"input_tokens": "BIGINT", "output_tokens": "BIGINT",
                             "cache_read_input_tokens": "BIGINT", "cache_creation_input_tokens": "BIGINT",
                             "cache_creation": {"ephemeral_5m_input_tokens": "BIGINT",
                                                "ephemeral_1h_input_tokens": "BIGINT"},
                             "service_tier": "VARCHAR"}}}')) AS j
    FROM ln
    WHERE contains(line, '"assistant"') OR contains(line, '"compact_boundary"')
)
SELECT file_idx, lineno, j,
       CASE
           WHEN j IS NULL AND unterminated THEN 'torn_last_line'
           WHEN j IS NULL THEN 'malformed'
           WHEN j.type = 'system' AND j.subtype = 'compact_boundary' THEN 'compact_boundary'
           WHEN j.type IS DISTINCT FROM 'assistant' THEN 'other'
           WHEN j.isApiErrorMessage THEN 'api_error'
           WHEN j.message.model = '<synthetic>' THEN 'synthetic'
           WHEN j.message.usage IS NULL
                OR (j.message.usage.input_tokens IS NULL AND j.message.usage.output_tokens IS NULL
                    AND j.message.usage.cache_read_input_tokens IS NULL
                    AND j.message.usage.cache_creation_input_tokens IS NULL
                    AND j.message.usage.cache_creation IS NULL) THEN 'assistant_without_usage'
           WHEN least(j.message.usage.input_tokens, j.message.usage.output_tokens,
                      j.message.usage.cache_read_input_tokens, j.message.usage.cache_creation_input_tokens,
                      j.message.usage.cache_creation.ephemeral_5m_input_tokens,
                      j.message.usage.cache_creation.ephemeral_1h_input_tokens) < 0 THEN 'negative'
           WHEN try_cast(j.timestamp AS TIMESTAMPTZ) IS NULL THEN 'bad_timestamp'
           WHEN coalesce(j.requestId, j.message.id) IS NULL THEN 'no_id'
           ELSE 'usage'
       END AS kind
FROM parsed;
