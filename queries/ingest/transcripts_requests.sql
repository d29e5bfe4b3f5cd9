-- title: Claude Code transcripts: one row per API response
-- description: from tx_rec (the parsed candidate lines of every file of the batch, see
--   ingest/transcripts_lines) and tx_files(file_idx, path, project, file_agent_id, file_is_agent)
--   selects the columns of the requests table, one row per response: lines grouped by message id
--   (a response is written as one line per content block); each copy of a response counts with
--   its largest output_tokens; the main-thread copy wins over a sidechain replay, then the larger
--   output. Rows come in no particular order; the parser fetches them as Arrow straight from this
--   query (storing them in a table first cost a third more).

WITH u AS (
    SELECT k.file_idx, k.lineno, coalesce(k.message_id, k.request_id) AS dedup_key,
           coalesce(k.is_sidechain, f.file_is_agent) AS sidechain,
           coalesce(k.output_tokens, 0) AS out, k.ts
    FROM tx_rec k JOIN tx_files f USING (file_idx)
    WHERE k.kind = 'usage'
), copies AS (
    -- A copy = the lines of one response in one file; it counts with its largest output and
    -- the time of its first line; its values come from the line with the largest output (the
    -- last such line: it carries the final stop_reason).
    SELECT file_idx, dedup_key, any_value(sidechain) AS sidechain, max(out) AS copy_out,
           min(ts) AS copy_ts, arg_max(lineno, (out, lineno)) AS lineno
    FROM u
    GROUP BY file_idx, dedup_key
), best AS (
    -- One copy per response: the main-thread copy over a sidechain replay, then the larger output.
    SELECT * FROM copies
    QUALIFY row_number() OVER (PARTITION BY dedup_key ORDER BY sidechain, copy_out DESC, file_idx) = 1
)
SELECT
    coalesce(k.request_id, k.message_id) AS request_key,
    k.request_id, k.message_id, b.copy_ts AS ts,
    'claude-transcript' AS source, 'claude-code' AS agent,
    k.session_id,
    CASE WHEN b.sidechain THEN coalesce(k.agent_id, f.file_agent_id, 'sidechain') ELSE 'main' END AS thread_id,
    CAST(NULL AS VARCHAR) AS user_id, CAST(NULL AS VARCHAR) AS org_id,
    coalesce(f.project, k.cwd) AS project,
    k.model,
    CASE WHEN b.sidechain THEN 'subagent' ELSE 'main' END AS query_source,
    coalesce(k.input_tokens, 0) AS input_tokens,
    coalesce(k.cache_read_tokens, 0) AS cache_read_tokens,
    -- The 5m/1h split when the record has it (before v2.1.152 the total could read 0 beside it).
    coalesce(k.cache_5m_tokens, 0) AS cache_write_5m_tokens,
    coalesce(k.cache_1h_tokens, 0) AS cache_write_1h_tokens,
    CASE WHEN k.cache_5m_tokens IS NOT NULL OR k.cache_1h_tokens IS NOT NULL THEN 0
         ELSE coalesce(k.cache_creation_tokens, 0) END AS cache_write_unknown_tokens,
    b.copy_out AS output_tokens,
    CAST(NULL AS DOUBLE) AS cost_usd, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS DOUBLE) AS ttft_ms,
    b.sidechain AS is_sidechain,
    CAST(json_object('version', k.version, 'requestId', k.request_id, 'gitBranch', k.git_branch,
                     'entrypoint', k.entrypoint, 'cwd', k.cwd, 'service_tier', k.service_tier,
                     'stop_reason', k.stop_reason) AS VARCHAR) AS attributes,
    f.path || ':' || k.lineno AS ingested_from
FROM best b
JOIN tx_rec k ON k.file_idx = b.file_idx AND k.lineno = b.lineno
JOIN tx_files f ON f.file_idx = b.file_idx;
