-- title: request_usage view
-- description: every request row, plus token.usage metric points for sessions that have no request
--   rows, so a request is never counted from both an api_request event and the metric.
--   Cumulative series are differenced per series in time order; a drop is a reset.

CREATE OR REPLACE VIEW metric_deltas AS
WITH ordered AS (
    SELECT *,
           lag(value) OVER w AS prev_value,
           lag(start_ts) OVER w AS prev_start
    FROM metric_points
    WINDOW w AS (PARTITION BY series_key ORDER BY ts, value)
)
SELECT * EXCLUDE (prev_value, prev_start),
       CASE
           WHEN temporality = 1 THEN value
           WHEN prev_value IS NULL THEN value
           WHEN value < prev_value THEN value                -- reset
           WHEN start_ts IS DISTINCT FROM prev_start AND start_ts > prev_start THEN value -- restarted series
           ELSE value - prev_value
       END AS delta
FROM ordered;

CREATE OR REPLACE VIEW request_usage AS
SELECT request_key, ts, source, agent, session_id, thread_id, user_id, org_id, project, model,
       query_source, input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
       cache_write_unknown_tokens, output_tokens, cost_usd, duration_ms, ttft_ms, is_sidechain,
       false AS from_metric
FROM requests
UNION ALL
SELECT 'metric:' || series_group AS request_key, ts, source, agent, session_id, 'main' AS thread_id,
       user_id, org_id, NULL AS project, model, query_source,
       input_tokens, cache_read_tokens, 0, 0, cache_write_unknown_tokens, output_tokens,
       NULL, NULL, NULL, false, true AS from_metric
FROM (
    SELECT md5(concat_ws('|', agent, session_id, model, query_source, CAST(ts AS VARCHAR))) AS series_group,
           ts, any_value(source) AS source, agent, session_id, any_value(user_id) AS user_id,
           any_value(org_id) AS org_id, model, query_source,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'input'), 0)) AS BIGINT) AS input_tokens,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'cacheRead'), 0)) AS BIGINT) AS cache_read_tokens,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'cacheCreation'), 0)) AS BIGINT) AS cache_write_unknown_tokens,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'output'), 0)) AS BIGINT) AS output_tokens
    FROM metric_deltas m
    WHERE NOT EXISTS (SELECT 1 FROM requests r WHERE r.session_id = m.session_id AND r.agent = m.agent)
    GROUP BY agent, session_id, model, query_source, ts
) g;
