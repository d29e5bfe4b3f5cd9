-- title: time bounds of the warehouse
-- description: first and last record time (UTC) over requests and metric points, and the row
--   counts of each table. Read from the tables, not the request_usage view, so it stays cheap.
SELECT least((SELECT min(ts) FROM requests), (SELECT min(ts) FROM metric_points)) AS first_ts,
       greatest((SELECT max(ts) FROM requests), (SELECT max(ts) FROM metric_points)) AS last_ts,
       (SELECT count(*) FROM requests) AS requests,
       (SELECT count(*) FROM metric_points) AS metric_points,
       (SELECT count(*) FROM block_requests) AS block_requests
