-- title: Claude Code transcripts: the candidate lines of a group of files, parsed
-- description: reads tx_raw(filename, content), whole transcript files, and tx_names(filename,
--   file_idx), their index in the batch, and builds table tx_part
--   (the parser names it tx_rec_<group>): the lines that contain the JSON token "assistant" or
--   "compact_boundary" (matched whatever the whitespace around it), their 1-based line numbers,
--   the fields kvtrace keeps (flat columns: a nested struct column is much slower to store) and
--   what each line is (kind: a usable response line, or why not), plus each file's last piece
--   (kind 'eof' unless it is a candidate) carrying the file's line count. Parsing only the
--   candidate lines is most of the speed: user, progress and snapshot records hold most of the
--   bytes. The parser runs this on one cursor per group of files, in parallel. The file
--   index is joined on last, to the few parsed lines: joined to whole files it cost 15% more.

CREATE OR REPLACE TABLE tx_part AS
WITH sp AS (
    SELECT filename, string_split(content, chr(10)) AS ls FROM tx_raw
), ln AS (
    SELECT filename, unnest(ls) AS line, unnest(range(1, len(ls) + 1)) AS lineno, len(ls) AS n FROM sp
), cand AS (
    -- One regular expression, not two contains(): RE2 looks for the shared leading quote with
    -- memchr and tests both words at once, so a line that has neither (most bytes) is read once.
    SELECT *, lineno <> n OR regexp_matches(line, '"(?:assistant|compact_boundary)"') AS candidate
    FROM ln
    WHERE lineno = n OR regexp_matches(line, '"(?:assistant|compact_boundary)"')
), parsed AS (
    SELECT filename, lineno, candidate,
           lineno = n AS last,   -- the piece after the last newline: empty, or a line still being written
           CASE WHEN lineno = n THEN n - CASE WHEN line = '' THEN 1 ELSE 0 END END AS file_lines,
           CASE WHEN candidate THEN try(json_transform(line, '{
               "type": "VARCHAR", "subtype": "VARCHAR", "timestamp": "VARCHAR",
               "sessionId": "VARCHAR", "agentId": "VARCHAR", "requestId": "VARCHAR", "isSidechain": "BOOLEAN",
               "isApiErrorMessage": "BOOLEAN", "cwd": "VARCHAR", "version": "VARCHAR", "gitBranch": "VARCHAR",
               "entrypoint": "VARCHAR",
               "message": {"id": "VARCHAR", "model": "VARCHAR", "stop_reason": "VARCHAR",
                   "usage": {"input_tokens": "BIGINT", "output_tokens": "BIGINT",
                             "cache_read_input_tokens": "BIGINT", "cache_creation_input_tokens": "BIGINT",
                             "cache_creation": {"ephemeral_5m_input_tokens": "BIGINT",
                                                "ephemeral_1h_input_tokens": "BIGINT"},
                             "service_tier": "VARCHAR"}}}')) END AS j,
           line
    FROM cand
), counted AS (
    -- A count that is present but not a whole number from 0 to 2^63-1 (text, null, NaN, 1e400,
    -- 1e20, an array or object, negative) rejects the line, naming the first such field. Any of
    -- those reads as NULL above, so only a line missing a count (or a split member beside its
    -- split object) is read again, for the counts as JSON texts (NULL when absent).
    SELECT * EXCLUDE (line),
           [j.message.usage.input_tokens, j.message.usage.output_tokens,
            j.message.usage.cache_read_input_tokens, j.message.usage.cache_creation_input_tokens,
            j.message.usage.cache_creation.ephemeral_5m_input_tokens,
            j.message.usage.cache_creation.ephemeral_1h_input_tokens] AS n,
           CASE WHEN j.message.usage IS NOT NULL AND (
                    j.message.usage.input_tokens IS NULL OR j.message.usage.output_tokens IS NULL
                    OR j.message.usage.cache_read_input_tokens IS NULL
                    OR j.message.usage.cache_creation_input_tokens IS NULL
                    OR (j.message.usage.cache_creation IS NOT NULL
                        AND (j.message.usage.cache_creation.ephemeral_5m_input_tokens IS NULL
                             OR j.message.usage.cache_creation.ephemeral_1h_input_tokens IS NULL)))
                THEN json_extract(line, ['$.message.usage.input_tokens', '$.message.usage.output_tokens',
                    '$.message.usage.cache_read_input_tokens', '$.message.usage.cache_creation_input_tokens',
                    '$.message.usage.cache_creation.ephemeral_5m_input_tokens',
                    '$.message.usage.cache_creation.ephemeral_1h_input_tokens']) END AS u
    FROM parsed
), checked AS (
    SELECT *, coalesce(
               nullif(list_position(list_transform(u, lambda x: x IS NOT NULL
                   AND coalesce(TRY_CAST(x->>'$' AS BIGINT) < 0, true)), true), 0),
               nullif(list_position(list_transform(n, lambda v: coalesce(v < 0, false)), true), 0)) AS bad
    FROM counted
), flat AS (
    SELECT filename, lineno, candidate, last, file_lines, j IS NULL AS unparsed,
           j.type AS type, j.subtype AS subtype, j.isApiErrorMessage AS api_error,
           j.message.id AS message_id, j.requestId AS request_id,
           try_cast(j.timestamp AS TIMESTAMPTZ)::TIMESTAMP AS ts,
           j.isSidechain AS is_sidechain, j.sessionId AS session_id, j.agentId AS agent_id, j.cwd AS cwd,
           j.message.model AS model, j.message.usage IS NOT NULL AS has_usage,
           n[1] AS input_tokens, n[2] AS output_tokens, n[3] AS cache_read_tokens,
           n[4] AS cache_creation_tokens, n[5] AS cache_5m_tokens, n[6] AS cache_1h_tokens,
           j.message.usage.cache_creation IS NOT NULL AS has_split_object,
           j.version AS version, j.gitBranch AS git_branch, j.entrypoint AS entrypoint,
           j.message.usage.service_tier AS service_tier, j.message.stop_reason AS stop_reason,
           CASE WHEN bad > 0 THEN 'message.usage.' || ['input_tokens', 'output_tokens',
               'cache_read_input_tokens', 'cache_creation_input_tokens',
               'cache_creation.ephemeral_5m_input_tokens', 'cache_creation.ephemeral_1h_input_tokens'][bad] END AS bad_field,
           CASE WHEN bad > 0 THEN left(coalesce(u[bad]::VARCHAR, n[bad]::VARCHAR), 40) END AS bad_value
    FROM checked
)
SELECT x.file_idx,
       f.* EXCLUDE (filename, candidate, last, unparsed, type, subtype, api_error, has_usage, has_split_object),
       CASE
           WHEN NOT candidate THEN 'eof'
           WHEN unparsed AND last THEN 'torn_last_line'
           WHEN unparsed THEN 'malformed'
           WHEN type = 'system' AND subtype = 'compact_boundary' THEN 'compact_boundary'
           WHEN type IS DISTINCT FROM 'assistant' THEN 'other'
           WHEN api_error THEN 'api_error'
           WHEN model = '<synthetic>' THEN 'synthetic'
           WHEN NOT has_usage THEN 'assistant_without_usage'
           WHEN bad_field IS NOT NULL THEN 'bad_count'
           WHEN input_tokens IS NULL AND output_tokens IS NULL AND cache_read_tokens IS NULL
                AND cache_creation_tokens IS NULL AND NOT has_split_object THEN 'assistant_without_usage'
           WHEN ts IS NULL THEN 'bad_timestamp'
           WHEN coalesce(request_id, message_id) IS NULL THEN 'no_id'
           ELSE 'usage'
       END AS kind
FROM flat f JOIN tx_names x ON x.filename = f.filename;
