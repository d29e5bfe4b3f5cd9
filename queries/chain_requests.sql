-- title: requests for prefix chains
-- description: one row per model request with what prefix-chain derivation needs: thread, model,
--   prompt split (read, write of any TTL, uncached input), output, and whether the client marked it
--   as (or right after) a compaction. Between $since (inclusive) and $until (exclusive), UTC; NULL
--   bounds are open. Every reuse analysis takes the rows in time, then request key order: `tie`
--   is a row's place by request key among the rows of its exact time (0 for a time of one row), so
--   (ts_us, tie) is that order, and a row's place in it is the number of rows of an earlier time
--   plus its tie. Rows come session by session (sessions in order of their first request, then
--   by id; a session's rows in that order), so a reader can take them in partitions of whole
--   sessions that started about the same time: a partition's rows then lie close together in
--   time order, and so do the places its numbers are written to.
--   Cheap at fleet scale: no window runs over every row (it would hold and spill them all once
--   more); a row's organization, where it lacks one, comes from any row of its session
--   (transcripts do not carry it, telemetry does) by a join to one row per session.
WITH w AS NOT MATERIALIZED (
    SELECT * FROM request_usage
    WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
      AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
),
session_org AS (
    -- a session's start as the rows below name it (a missing id is ''), so none is split in two
    SELECT session_id, max(org_id) AS org_id,
           min(min(ts)) OVER (PARTITION BY coalesce(session_id, '')) AS session_start
    FROM w GROUP BY session_id
),
tied AS (
    SELECT request_key, row_number() OVER (PARTITION BY ts ORDER BY request_key) - 1 AS tie
    FROM w WHERE ts IN (SELECT ts FROM w GROUP BY ts HAVING count(*) > 1)
)
SELECT
    epoch_us(u.ts) AS ts_us,
    coalesce(t.tie, 0) AS tie,
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
LEFT JOIN tied t ON t.request_key = u.request_key
ORDER BY o.session_start, session_id, ts_us, tie
