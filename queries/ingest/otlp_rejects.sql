-- title: OTLP JSON: the parse's rejected lines and records
-- description: lines that are not OTLP JSON (otlp_line_class) and records whose fields are
--   unusable (the signal row tables), with the field to name.

SELECT line_no, reason, field FROM otlp_line_class WHERE reason IS NOT NULL
UNION ALL
SELECT line_no, reject_reason, reject_field FROM otlp_log_rows WHERE reject_field IS NOT NULL
UNION ALL
SELECT line_no, reject_reason, reject_field FROM otlp_metric_rows WHERE reject_field IS NOT NULL
UNION ALL
SELECT line_no, reject_reason, reject_field FROM otlp_span_rows WHERE reject_field IS NOT NULL
UNION ALL
-- other agents' rows: a reject_field on a row that is out is a clip warning (the row is kept)
SELECT line_no, reject_reason, reject_field FROM otlp_agent_log_rows WHERE reject_field IS NOT NULL
UNION ALL
SELECT line_no, reject_reason, reject_field FROM otlp_agent_metric_rows WHERE reject_field IS NOT NULL
UNION ALL
SELECT line_no, reject_reason, reject_field FROM otlp_genai_span_rows WHERE reject_field IS NOT NULL
ORDER BY line_no
