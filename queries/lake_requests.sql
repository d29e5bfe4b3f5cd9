-- title: requests for the Parquet lake
-- description: every request row between $since (inclusive) and $until (exclusive), UTC, with its
--   UTC day as the partition column; NULL bounds are open.
SELECT *, CAST(CAST(ts AS DATE) AS VARCHAR) AS day
FROM requests
WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
