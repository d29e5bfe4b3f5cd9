-- title: turns for the serving model
-- description: one row per model request with what a closed-loop client of `kvtrace simulate`
--   needs: session, thread, end time, recorded duration (NULL when unknown), prompt tokens
--   (cache reads + writes of any TTL + uncached input) and output tokens. Between $since
--   (inclusive) and $until (exclusive), UTC; NULL bounds are open. Ordered by time.
SELECT
    coalesce(session_id, '') AS session_id,
    coalesce(thread_id, 'main') AS thread_id,
    epoch_us(ts) AS ts_us,
    duration_ms,
    cache_read_tokens + cache_write_5m_tokens + cache_write_1h_tokens + cache_write_unknown_tokens
        + input_tokens AS prompt_tokens,
    output_tokens
FROM request_usage
WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
ORDER BY ts, session_id, thread_id, request_key
