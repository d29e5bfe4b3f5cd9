-- title: OTLP JSON: the parse's token.usage points
-- description: the metric points of one parse, one per point key (a point exported
--   twice in one input is kept once), with provenance ($origin:line).

SELECT * EXCLUDE (line_no, kind, n, out, reject_field, reject_reason), $origin || ':' || line_no AS ingested_from
FROM (SELECT * FROM otlp_metric_rows UNION ALL BY NAME SELECT * FROM otlp_agent_metric_rows)
WHERE out
QUALIFY row_number() OVER (PARTITION BY point_key ORDER BY line_no) = 1
