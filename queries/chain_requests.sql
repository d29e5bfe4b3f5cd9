-- title: requests for prefix chains
-- description: one row per model request with what prefix-chain derivation needs: thread, model,
--   prompt split (read, write of any TTL, uncached input), output, and whether the client marked it
--   as (or right after) a compaction. Between $since (inclusive) and $until (exclusive), UTC; NULL
--   bounds are open. `gidx` numbers the rows in time, then request key order (the order every
--   reuse analysis uses); rows come session by session (by session id, then gidx), so a reader can
--   take them in partitions of whole sessions. The request key only orders them (it is not
--   returned: every row of the sort costs memory).
SELECT * EXCLUDE (request_key) FROM (
SELECT
    row_number() OVER (ORDER BY u.ts, u.request_key) - 1 AS gidx,
    u.request_key,
    epoch_us(u.ts) AS ts_us,
    -- A session's organization from any of its rows (transcripts do not carry it, telemetry does).
    coalesce(u.org_id, max(u.org_id) OVER (PARTITION BY u.session_id), '') AS org_id,
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
    -- The raw client query source ('compact' for a compaction request) or a compaction marker.
    coalesce(json_extract_string(r.attributes, '$.query_source') = 'compact', false)
        OR coalesce(json_extract_string(r.attributes, '$.raw_query_source') = 'compact', false)
        AS is_compact_request,
    coalesce(TRY_CAST(json_extract_string(r.attributes, '$.compaction') AS BOOLEAN), false)
        OR json_extract(r.attributes, '$.compact_boundary') IS NOT NULL
        AS after_compaction
FROM request_usage u
LEFT JOIN requests r ON r.request_key = u.request_key
WHERE ($since IS NULL OR u.ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR u.ts < CAST($until AS TIMESTAMP))
)
ORDER BY session_id, gidx
