-- title: merge staged metric points into the warehouse
-- description: one transaction's metric points (view staged_in) added idempotently: a point
--   whose content key (series + times + value) is already stored, or repeated in the batch, is
--   a duplicate and added once.

INSERT INTO metric_points BY NAME
SELECT s.* FROM staged_in s
WHERE NOT EXISTS (SELECT 1 FROM metric_points m WHERE m.point_key = s.point_key)
QUALIFY row_number() OVER (PARTITION BY s.point_key ORDER BY s.ingested_from) = 1
