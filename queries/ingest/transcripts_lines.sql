-- title: Claude Code transcripts: the candidate lines of a group of files, parsed
-- description: reads tx_raw(file_idx, content), whole transcript files, and builds table tx_part
--   (the parser names it tx_rec_<group>): the lines that contain the JSON token "assistant" or
--   "compact_boundary" (matched whatever the whitespace around it), their 1-based line numbers,
--   the parsed fields and what each line is (kind: a usable response line, or why not), plus
--   each file's last piece (kind 'eof' unless it is a candidate) carrying the file's line count.
--   Parsing only the candidate lines is most of the speed: user, progress and snapshot records
--   hold most of the bytes. The parser runs this on one connection per group of files, in parallel.

CREATE OR REPLACE TABLE tx_part AS
WITH sp AS (
    SELECT file_idx, string_split(content, chr(10)) AS ls FROM tx_raw
), ln AS (
    SELECT file_idx, unnest(ls) AS line, unnest(range(1, len(ls) + 1)) AS lineno, len(ls) AS n FROM sp
), cand AS (
    SELECT *, contains(line, '"assistant"') OR contains(line, '"compact_boundary"') AS candidate
    FROM ln
), parsed AS (
    SELECT file_idx, lineno, candidate,
           -- the piece after the last newline: empty, or a line still being written
           lineno = n AS last, line = '' AS empty,
           n - CASE WHEN lineno = n AND line = '' THEN 1 ELSE 0 END AS file_lines,
           CASE WHEN candidate THEN try(json_transform(line, '{
               "type": "VARCHAR", "subtype": "VARCHAR", "uuid": "VARCHAR", "timestamp": "VARCHAR",
               "sessionId": "VARCHAR", "agentId": "VARCHAR", "requestId": "VARCHAR", "isSidechain": "BOOLEAN",
               "isApiErrorMessage": "BOOLEAN", "cwd": "VARCHAR", "version": "VARCHAR", "gitBranch": "VARCHAR",
               "entrypoint": "VARCHAR", "compactMetadata": {"preTokens": "BIGINT", "trigger": "VARCHAR"},
               "message": {"id": "VARCHAR", "model": "VARCHAR", "stop_reason": "VARCHAR",
                   "usage": {"input_tokens": "BIGINT", "output_tokens": "BIGINT",
                             "cache_read_input_tokens": "BIGINT", "cache_creation_input_tokens": "BIGINT",
                             "cache_creation": {"ephemeral_5m_input_tokens": "BIGINT",
                                                "ephemeral_1h_input_tokens": "BIGINT"},
                             "service_tier": "VARCHAR"}}}')) END AS j
    FROM cand
    WHERE candidate OR lineno = n
)
SELECT file_idx, lineno, CASE WHEN last THEN file_lines END AS file_lines, j,
       CASE
           WHEN NOT candidate THEN 'eof'
           WHEN j IS NULL AND last THEN 'torn_last_line'
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
