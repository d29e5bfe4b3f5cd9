-- title: token classes rolled up per hour, session and dimension
-- description: the window's requests (events, transcripts, metric-derived rows for sessions
--   without events) summed per hour x agent x session x user x model x query source x project,
--   between $since (inclusive) and $until (exclusive), UTC; NULL bounds are open. Reports group
--   this small frame instead of every request row.
SELECT date_trunc('hour', ts) AS hour, agent, session_id, user_id, model, query_source, project,
       count(*) AS requests,
       sum(input_tokens) AS input_tokens, sum(cache_read_tokens) AS cache_read_tokens,
       sum(cache_write_5m_tokens) AS cache_write_5m_tokens, sum(cache_write_1h_tokens) AS cache_write_1h_tokens,
       sum(cache_write_unknown_tokens) AS cache_write_unknown_tokens, sum(output_tokens) AS output_tokens,
       sum(cost_usd) AS cost_usd, min(ts) AS first_ts, max(ts) AS last_ts
FROM request_usage
WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
GROUP BY ALL
