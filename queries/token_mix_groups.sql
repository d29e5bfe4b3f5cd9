-- title: token mix of a window: overall, per report group and per chart bucket
-- description: the requests between $since (inclusive) and $until (exclusive), UTC (NULL bounds
--   are open), first rolled up per hour x agent x session x user x model x query source x project
--   (as in usage_rollup), then summed (token classes, requests, distinct sessions) per (grp, key):
--   grp 'total' (one row, key NULL, with the first and last request time); one grp per name in
--   $groups, a comma-separated list of hour, day, week, month, model, user, session,
--   query_source, agent, project (key: the group's value, times as text: hour and day as ISO,
--   week as ISO week 2026-W45, month as 2026-11); and 'series:hour' or 'series:day', the chart's
--   buckets (per hour when the requests span at most $hourly_max_s seconds, else per day).
--   Time keys are local times of the IANA zone $tz ('UTC': none).
--   cost_units prices the token classes at list prices: $prices is the price table as a list of
--   {pattern, input, output} (USD per million tokens, first matching pattern on the model wins),
--   writes cost $write_5m (5 min and unknown TTL) or $write_1h times the input price, reads
--   $read times it; requests of a model without a price add nothing to cost_units and count in
--   unpriced_requests. reported_cost_usd sums the cost the telemetry reported (NULL: none).
--   Money is summed in integers, so that the same rows give the same bits in any order:
--   cost_units is USD x 1e16 (prices in micro-dollars per million tokens, multipliers in 1e-4),
--   reported_cost_usd a DECIMAL(38, 12).
--   Each rollup row is repeated once per group asked for and once for the series. Rows come in
--   no particular order.
--   $usage: what to read, request_usage when NULL; the caller passes 'requests' (the same rows)
--   when the warehouse has no metric points, sparing the view's metric-points branch (a third
--   of the query on 43 k requests). Distinct sessions are counted in two steps (per session,
--   then per group), which DuckDB plans more cheaply than count(DISTINCT).
WITH rolled AS MATERIALIZED (
    SELECT date_trunc('hour', CASE WHEN $tz = 'UTC' THEN ts ELSE timezone($tz, timezone('UTC', ts)) END) AS hour,
           agent, session_id, user_id, model, query_source, project,
           count(*) AS requests,
           sum(input_tokens) AS input_tokens, sum(cache_read_tokens) AS cache_read_tokens,
           sum(cache_write_5m_tokens) AS cache_write_5m_tokens, sum(cache_write_1h_tokens) AS cache_write_1h_tokens,
           sum(cache_write_unknown_tokens) AS cache_write_unknown_tokens, sum(output_tokens) AS output_tokens,
           sum(CAST(cost_usd AS DECIMAL(38, 12))) AS reported_cost_usd, min(ts) AS first_ts, max(ts) AS last_ts
    FROM query_table(coalesce($usage, 'request_usage'))
    WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
      AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
    GROUP BY ALL
), usage AS MATERIALIZED (
    SELECT * EXCLUDE (price),
           CAST(round(price.input * 1e6) AS HUGEINT)
               * (CAST(input_tokens AS HUGEINT) * 10000
                  + CAST(round($write_5m * 1e4) AS HUGEINT) * (cache_write_5m_tokens + cache_write_unknown_tokens)
                  + CAST(round($write_1h * 1e4) AS HUGEINT) * cache_write_1h_tokens
                  + CAST(round($read * 1e4) AS HUGEINT) * cache_read_tokens)
           + CAST(round(price.output * 1e6) AS HUGEINT) * output_tokens * 10000 AS cost_units,
           CASE WHEN price IS NULL THEN requests ELSE 0 END AS unpriced_requests
    FROM (SELECT r.*, list_filter(CAST($prices AS STRUCT(pattern VARCHAR, input DOUBLE, output DOUBLE)[]),
                                  lambda p: r.model GLOB p.pattern)[1] AS price
          FROM rolled r)
), asked AS MATERIALIZED (
    SELECT list_distinct(list_filter(coalesce(string_split($groups, ','), []), lambda n: n <> '')) AS names,
           (SELECT epoch_us(max(last_ts)) - epoch_us(min(first_ts)) FROM usage) <= CAST($hourly_max_s AS DOUBLE) * 1e6 AS hourly
)
SELECT grp, key, sum(requests) AS requests, count(session_id) AS sessions,
       sum(cache_read) AS cache_read, sum(cache_write_5m) AS cache_write_5m,
       sum(cache_write_1h) AS cache_write_1h, sum(cache_write_unknown) AS cache_write_unknown,
       sum(output) AS output, sum(input_uncached) AS input_uncached,
       sum(cost_units) AS cost_units, sum(unpriced_requests) AS unpriced_requests,
       sum(reported_cost_usd) AS reported_cost_usd,
       min(first_ts) AS first_ts, max(last_ts) AS last_ts
FROM (
    SELECT grp, key, session_id, sum(requests) AS requests,
           sum(cache_read_tokens) AS cache_read, sum(cache_write_5m_tokens) AS cache_write_5m,
           sum(cache_write_1h_tokens) AS cache_write_1h, sum(cache_write_unknown_tokens) AS cache_write_unknown,
           sum(output_tokens) AS output, sum(input_tokens) AS input_uncached,
           sum(cost_units) AS cost_units, sum(unpriced_requests) AS unpriced_requests,
           sum(reported_cost_usd) AS reported_cost_usd,
           min(first_ts) AS first_ts, max(last_ts) AS last_ts
    FROM (
        SELECT 'total' AS grp, CAST(NULL AS VARCHAR) AS key, u.* FROM usage u
        UNION ALL
        SELECT g.grp,
               CASE g.dim WHEN 'day' THEN strftime(u.hour, '%Y-%m-%d') WHEN 'hour' THEN strftime(u.hour, '%Y-%m-%dT%H:00')
                          WHEN 'week' THEN strftime(u.hour, '%G-W%V') WHEN 'month' THEN strftime(u.hour, '%Y-%m')
                          WHEN 'model' THEN u.model WHEN 'user' THEN u.user_id WHEN 'session' THEN u.session_id
                          WHEN 'query_source' THEN u.query_source WHEN 'agent' THEN u.agent
                          WHEN 'project' THEN u.project END,
               u.*
        FROM usage u, (
            -- (grp, the dimension keying it): each group asked for once, and the chart series
            SELECT unnest(names) AS grp, unnest(names) AS dim FROM asked
            UNION ALL
            SELECT 'series:' || bucket, bucket FROM (SELECT CASE WHEN hourly THEN 'hour' ELSE 'day' END AS bucket FROM asked)
        ) g
    )
    GROUP BY grp, key, session_id
)
GROUP BY grp, key
