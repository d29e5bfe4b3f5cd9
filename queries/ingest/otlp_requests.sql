-- title: OTLP JSON: the parse's request rows
-- description: the request rows of one parse, with provenance ($origin:line). A
--   claude_code.llm_request span of a request that also has its api_request event in this
--   input is not a second row: it only lends the event what the event lacks (time to first
--   token, which Claude Code 2.1.x puts on the span only; duration and cost, which Codex events
--   lack), as the warehouse merge does when the two come in separate ingests.

-- NOT MATERIALIZED: each CTE is read twice, and a materialized copy of every event row costs
-- more than reading the temp tables twice (a third of this query, measured).
WITH events AS NOT MATERIALIZED (
    SELECT * EXCLUDE (kind, out, reject_field, reject_reason) FROM otlp_log_rows WHERE out
    UNION ALL BY NAME   -- Codex and Gemini CLI events
    SELECT * EXCLUDE (kind, out, reject_field, reject_reason) FROM otlp_agent_log_rows WHERE out
), spans AS NOT MATERIALIZED (
    SELECT * EXCLUDE (kind, out, reject_field, reject_reason) FROM otlp_span_rows WHERE out
    UNION ALL BY NAME   -- GenAI, OpenInference and Codex spans (a Codex span shares its event's key)
    SELECT * EXCLUDE (kind, out, reject_field, reject_reason) FROM otlp_genai_span_rows WHERE out
), span_fill AS (
    SELECT request_key, max(ttft_ms) AS span_ttft_ms, max(duration_ms) AS span_duration_ms,
           max(cost_usd) AS span_cost_usd
    FROM spans GROUP BY request_key
)
SELECT e.* EXCLUDE (line_no, ttft_ms, duration_ms, cost_usd), coalesce(e.ttft_ms, f.span_ttft_ms) AS ttft_ms,
       coalesce(e.duration_ms, f.span_duration_ms) AS duration_ms, coalesce(e.cost_usd, f.span_cost_usd) AS cost_usd,
       $origin || ':' || e.line_no AS ingested_from
FROM events e LEFT JOIN span_fill f USING (request_key)
UNION ALL BY NAME
SELECT s.* EXCLUDE (line_no), $origin || ':' || s.line_no AS ingested_from
FROM spans s ANTI JOIN events e USING (request_key)
