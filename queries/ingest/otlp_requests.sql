-- title: OTLP JSON: the parse's request rows
-- description: the request rows of one parse, with provenance ($origin:line). A
--   claude_code.llm_request span of a request that also has its api_request event in this
--   input is not a second row: it only lends the event what the event lacks (time to first
--   token, which Claude Code 2.1.x puts on the span only).

WITH rows AS (
    SELECT * EXCLUDE (kind, out, reject_field, reject_reason) FROM otlp_log_rows WHERE out
    UNION ALL BY NAME
    SELECT * EXCLUDE (kind, out, reject_field, reject_reason) FROM otlp_span_rows WHERE out
), span_fill AS (
    SELECT request_key, max(ttft_ms) AS span_ttft_ms FROM rows WHERE source = 'otlp-span' GROUP BY request_key
), events AS (
    SELECT DISTINCT request_key FROM rows WHERE source = 'otlp-log'
)
SELECT r.* EXCLUDE (line_no, ttft_ms),
       CASE WHEN r.source = 'otlp-log' THEN coalesce(r.ttft_ms, f.span_ttft_ms) ELSE r.ttft_ms END AS ttft_ms,
       $origin || ':' || r.line_no AS ingested_from
FROM rows r LEFT JOIN span_fill f USING (request_key)
WHERE r.source = 'otlp-log' OR r.request_key NOT IN (SELECT request_key FROM events)
