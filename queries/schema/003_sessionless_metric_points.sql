-- title: request_usage for metric points without a session
-- description: replaces the request_usage view of 002. A metric point with a session id is used
--   only for a session that has no request rows of its agent (unchanged). A point without one
--   (Codex's codex.turn.token_usage carries no session or conversation id) cannot be matched to
--   sessions, and comparing its NULL session with anything never matched, so it was counted
--   beside the request rows it duplicates; now it is used only when its agent has no request
--   row at all in the UTC days its window (start_ts, ts] touches.

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
    WHERE CASE
        WHEN m.session_id IS NOT NULL THEN
            NOT EXISTS (SELECT 1 FROM requests r WHERE r.session_id = m.session_id AND r.agent = m.agent)
        ELSE
            NOT EXISTS (SELECT 1 FROM requests r
                        WHERE r.agent = m.agent
                          AND r.ts >= date_trunc('day', coalesce(m.start_ts, m.ts))
                          AND r.ts < date_trunc('day', m.ts) + INTERVAL 1 DAY)
    END
    GROUP BY agent, session_id, model, query_source, ts
) g;
