-- title: requests in a window
-- description: one row per model request (events, transcripts, and metric-derived rows for sessions
--   without events) with its token classes, between $since (inclusive) and $until (exclusive), UTC.
--   NULL bounds are open.
SELECT ts, agent, session_id, thread_id, user_id, org_id, project, model, query_source, source,
       input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
       cache_write_unknown_tokens, output_tokens, cost_usd, ttft_ms, from_metric
FROM request_usage
WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
ORDER BY ts
