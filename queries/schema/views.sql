-- title: views over the warehouse tables
-- description: derived views, not data: metric_deltas (delta per metric point; cumulative series
--   differenced per series in time order, a drop being a reset) and request_usage (every request
--   row, plus metric points only where no request row repeats them). Store re-applies this file
--   whenever its text changes (checksum in _views), so a view is changed here, in one place,
--   never by a new migration.
--
--   request_usage rules: a metric point with a session id is used only for a session with no
--   request rows of its agent. A point without one (Codex's codex.turn.token_usage carries no
--   session id) is used unless requests of the same agent, user and org fall inside the point's
--   own window (start, time] widened by 10 min (for a cumulative point: since the series'
--   previous point).

CREATE OR REPLACE VIEW metric_deltas AS
WITH ordered AS (
    SELECT *,
           lag(value) OVER w AS prev_value,
           lag(start_ts) OVER w AS prev_start,
           lag(ts) OVER w AS prev_ts
    FROM metric_points
    WINDOW w AS (PARTITION BY series_key ORDER BY ts, value)
)
SELECT * EXCLUDE (prev_value, prev_start, prev_ts),
       CASE
           WHEN temporality = 1 THEN value
           WHEN prev_value IS NULL THEN value
           WHEN value < prev_value THEN value                -- reset
           WHEN start_ts IS DISTINCT FROM prev_start AND start_ts > prev_start THEN value -- restarted series
           ELSE value - prev_value
       END AS delta,
       CASE WHEN temporality = 1 THEN start_ts ELSE coalesce(prev_ts, start_ts) END AS window_start
FROM ordered;

CREATE OR REPLACE VIEW request_usage AS
SELECT request_key, ts, source, agent, session_id, thread_id, user_id, org_id, project, model,
       query_source, input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
       cache_write_unknown_tokens, output_tokens, cost_usd, duration_ms, ttft_ms, is_sidechain,
       false AS from_metric,
       -- A compaction request (the client's raw query source), or the first request after one.
       coalesce(json_extract_string(attributes, '$.query_source') = 'compact', false)
           OR coalesce(json_extract_string(attributes, '$.raw_query_source') = 'compact', false)
           AS is_compact_request,
       coalesce(TRY_CAST(json_extract_string(attributes, '$.compaction') AS BOOLEAN), false)
           OR json_extract(attributes, '$.compact_boundary') IS NOT NULL
           AS after_compaction
FROM requests
UNION ALL
SELECT 'metric:' || series_group AS request_key, ts, source, agent, session_id, 'main' AS thread_id,
       user_id, org_id, NULL AS project, model, query_source,
       input_tokens, cache_read_tokens, 0, 0, cache_write_unknown_tokens, output_tokens,
       NULL, NULL, NULL, false, true AS from_metric, false, false
FROM (
    -- as JSON, a missing value stays apart from its neighbours (concat_ws would skip it)
    SELECT md5(to_json([agent, session_id, model, query_source, CAST(ts AS VARCHAR)])) AS series_group,
           ts, any_value(source) AS source, agent, session_id, any_value(user_id) AS user_id,
           any_value(org_id) AS org_id, model, query_source,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'input'), 0)) AS BIGINT) AS input_tokens,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'cacheRead'), 0)) AS BIGINT) AS cache_read_tokens,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'cacheCreation'), 0)) AS BIGINT) AS cache_write_unknown_tokens,
           CAST(round(coalesce(sum(delta) FILTER (WHERE token_type = 'output'), 0)) AS BIGINT) AS output_tokens
    FROM metric_deltas m
    WHERE CASE
        WHEN m.session_id IS NOT NULL THEN
            -- against the distinct (session, agent) pairs of requests of sessions that have
            -- points: the join holds those pairs, not every request (8 GB at 100 M requests)
            NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT session_id, agent FROM requests
                                       WHERE session_id IN (SELECT session_id FROM metric_points)) r
                        WHERE r.session_id = m.session_id AND r.agent = m.agent)
        ELSE
            -- only the same agent's requests of the same user and org, inside the point's own
            -- window widened by 10 min (clients stamp a request before or after the export window
            -- that counts it): another user's requests that day say nothing about this point
            NOT EXISTS (SELECT 1 FROM requests r
                        WHERE r.agent = m.agent
                          AND r.agent IN (SELECT agent FROM metric_points WHERE session_id IS NULL)
                          AND r.user_id IS NOT DISTINCT FROM m.user_id
                          AND r.org_id IS NOT DISTINCT FROM m.org_id
                          AND r.ts > coalesce(m.window_start, date_trunc('day', m.ts)) - INTERVAL 10 MINUTE
                          AND r.ts <= m.ts + INTERVAL 10 MINUTE)
    END
    GROUP BY agent, session_id, model, query_source, ts
) g;
