-- title: time bounds of the warehouse
-- description: first and last request time (UTC) and the row counts of each table.
SELECT (SELECT min(ts) FROM request_usage) AS first_ts,
       (SELECT max(ts) FROM request_usage) AS last_ts,
       (SELECT count(*) FROM requests) AS requests,
       (SELECT count(*) FROM metric_points) AS metric_points,
       (SELECT count(*) FROM block_requests) AS block_requests
