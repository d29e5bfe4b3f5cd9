-- title: requests for prefix chains
-- description: one row per model request with what prefix-chain derivation needs: thread, model,
--   prompt split (read, write of any TTL, uncached input), output, and whether the client marked it
--   as (or right after) a compaction. Between $since (inclusive) and $until (exclusive), UTC; NULL
--   bounds are open. `gidx` numbers the rows in time, then request key order (the order every
--   reuse analysis uses); rows come session by session (by session id, then gidx), so a reader can
--   take them in partitions of whole sessions. The request key only orders them (it is not
--   returned: every row of the sort costs memory). A session's organization, where a row lacks
--   it, comes from any of its rows (transcripts do not carry it, telemetry does) by a join to one
--   row per session: a window over every row would hold and spill them all once more.
WITH w AS (
    SELECT * FROM request_usage
    WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
      AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
),
session_org AS (SELECT session_id, max(org_id) AS org_id FROM w GROUP BY session_id)
SELECT row_number() OVER (ORDER BY ts, request_key) - 1 AS gidx, * EXCLUDE (ts, request_key) FROM (
    SELECT
        u.ts,
        u.request_key,
        epoch_us(u.ts) AS ts_us,
        coalesce(u.org_id, o.org_id, '') AS org_id,
        coalesce(u.session_id, '') AS session_id,
        coalesce(u.thread_id, 'main') AS thread_id,
        coalesce(u.model, '') AS model,
        coalesce(u.query_source, 'main') AS query_source,
        u.cache_read_tokens AS read_tokens,
        u.cache_write_5m_tokens + u.cache_write_1h_tokens + u.cache_write_unknown_tokens AS write_tokens,
        u.cache_write_5m_tokens AS write_5m_tokens,
        u.cache_write_1h_tokens AS write_1h_tokens,
        u.input_tokens AS input_tokens,
        u.output_tokens AS output_tokens,
        u.is_compact_request,
        u.after_compaction
    FROM w u
    LEFT JOIN session_org o ON o.session_id IS NOT DISTINCT FROM u.session_id
)
ORDER BY session_id, gidx
