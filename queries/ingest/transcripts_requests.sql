-- title: Claude Code transcripts: one row per API response
-- description: from tx_rec (the parsed candidate lines of every file of the batch, see
--   ingest/transcripts_lines) and tx_files(file_idx, path, project, file_agent_id, file_is_agent)
--   builds tx_requests with the columns of the requests table, one row per response:
--   lines grouped by message id (a response is written as one line per content block); each
--   copy of a response counts with its largest output_tokens; the main-thread copy wins over a
--   sidechain replay, then the larger output.

CREATE OR REPLACE TEMP TABLE tx_requests AS
WITH u AS (
    SELECT k.file_idx, k.lineno, f.path, f.project AS folder_project, f.file_agent_id,
           j.message.id AS message_id, j.requestId AS request_id,
           coalesce(j.message.id, j.requestId) AS dedup_key,
           CAST(CAST(j.timestamp AS TIMESTAMPTZ) AS TIMESTAMP) AS ts,
           coalesce(j.isSidechain, f.file_is_agent) AS is_sidechain,
           coalesce(j.message.usage.output_tokens, 0) AS out
    FROM tx_rec k JOIN tx_files f USING (file_idx)
    WHERE k.kind = 'usage'
), copies AS (
    -- A copy = the lines of one response in one file; it counts with its largest output and
    -- the time of its first line.
    SELECT *, max(out) OVER c AS copy_out, min(ts) OVER c AS copy_ts
    FROM u
    WINDOW c AS (PARTITION BY file_idx, dedup_key)
), best AS (
    -- One copy per response: the main-thread copy over a sidechain replay, then the larger
    -- output; within it the line with the largest output, the last one on a tie (it carries
    -- the final stop_reason).
    SELECT * FROM copies
    QUALIFY row_number() OVER (PARTITION BY dedup_key
                               ORDER BY is_sidechain, copy_out DESC, out DESC, file_idx, lineno DESC) = 1
)
SELECT
    coalesce(b.request_id, b.message_id) AS request_key,
    b.request_id, b.message_id, b.copy_ts AS ts,
    'claude-transcript' AS source, 'claude-code' AS agent,
    j.sessionId AS session_id,
    CASE WHEN b.is_sidechain THEN coalesce(j.agentId, b.file_agent_id, 'sidechain') ELSE 'main' END AS thread_id,
    CAST(NULL AS VARCHAR) AS user_id, CAST(NULL AS VARCHAR) AS org_id,
    coalesce(b.folder_project, j.cwd) AS project,
    j.message.model AS model,
    CASE WHEN b.is_sidechain THEN 'subagent' ELSE 'main' END AS query_source,
    coalesce(j.message.usage.input_tokens, 0) AS input_tokens,
    coalesce(j.message.usage.cache_read_input_tokens, 0) AS cache_read_tokens,
    -- The 5m/1h split when the record has it (before v2.1.152 the total could read 0 beside it).
    coalesce(j.message.usage.cache_creation.ephemeral_5m_input_tokens, 0) AS cache_write_5m_tokens,
    coalesce(j.message.usage.cache_creation.ephemeral_1h_input_tokens, 0) AS cache_write_1h_tokens,
    CASE WHEN j.message.usage.cache_creation.ephemeral_5m_input_tokens IS NOT NULL
              OR j.message.usage.cache_creation.ephemeral_1h_input_tokens IS NOT NULL THEN 0
         ELSE coalesce(j.message.usage.cache_creation_input_tokens, 0) END AS cache_write_unknown_tokens,
    b.copy_out AS output_tokens,
    CAST(NULL AS DOUBLE) AS cost_usd, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS DOUBLE) AS ttft_ms,
    b.is_sidechain,
    CAST(json_object('version', j.version, 'requestId', j.requestId, 'gitBranch', j.gitBranch,
                     'entrypoint', j.entrypoint, 'cwd', j.cwd, 'service_tier', j.message.usage.service_tier,
                     'stop_reason', j.message.stop_reason) AS VARCHAR) AS attributes,
    b.path || ':' || b.lineno AS ingested_from
FROM best b JOIN tx_rec k USING (file_idx, lineno)
ORDER BY b.file_idx, b.lineno;
