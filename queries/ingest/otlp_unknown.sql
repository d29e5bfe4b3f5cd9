-- title: OTLP JSON: records seen but not used
-- description: counts per kind (event:<name>, log:<name>, metric:<name>, span:<name>) of the
--   records that are neither output nor rejected.

SELECT kind, sum(n) AS n FROM (
    SELECT kind, 1 AS n FROM otlp_log_rows WHERE NOT out AND reject_field IS NULL AND kind IS NOT NULL
    UNION ALL
    SELECT kind, n FROM otlp_metric_rows WHERE NOT out AND reject_field IS NULL
    UNION ALL
    SELECT kind, 1 FROM otlp_span_rows WHERE NOT out AND reject_field IS NULL
    UNION ALL
    SELECT kind, 1 FROM otlp_agent_log_rows WHERE NOT out AND reject_field IS NULL
    UNION ALL
    SELECT kind, n FROM otlp_agent_metric_rows WHERE NOT out AND reject_field IS NULL
    UNION ALL
    SELECT kind, 1 FROM otlp_genai_span_rows WHERE NOT out AND reject_field IS NULL
)
GROUP BY kind
