-- title: time bounds of the warehouse
-- description: first and last record time (UTC) over requests and metric points, and the row
--   counts of each table. Read from the tables, not the request_usage view, so it stays cheap:
--   one aggregate per table (five scalar subqueries cost twice as much to plan).
SELECT least(r.first_ts, m.first_ts) AS first_ts, greatest(r.last_ts, m.last_ts) AS last_ts,
       r.n AS requests, m.n AS metric_points, b.n AS block_requests
FROM (SELECT min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS n FROM requests) r,
     (SELECT min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS n FROM metric_points) m,
     (SELECT count(*) AS n FROM block_requests) b
