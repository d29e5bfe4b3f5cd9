-- title: staged requests that match a stored row
-- description: temp table matched(s_key, r_key, better, s_rank): for each staged row (view
--   staged, see ingest/merge_requests) the stored row it duplicates, if any: by request key, else
--   by message id, else (a copy from another source without a request id) by agent, session,
--   prompt-side counts and time. better: the staged copy outranks the stored row, so it becomes
--   the merged row's primary copy (see ingest/merge_requests): a source of higher rank, or of the
--   same source the main-thread copy over a sidechain replay, then the larger output. s_rank: the
--   staged copy's source rank. Temp table match_pairs keeps every stored row a staged row
--   matches (ingest/merge_fold reads it). The statement's row count is the number of staged rows that match:
--   when it is 0 the pipeline inserts the staged rows as they are and skips ingest/merge_requests.

-- Source rank, lower first: the agent's own files (the thread, the 5m/1h split, the project),
-- then its OTLP events (user, organization, cost), metric-derived requests, then trace spans
-- (the model as the client labels it, no query source). Ties between sources by name.
CREATE OR REPLACE TEMP MACRO source_rank(src) AS
    CASE src WHEN 'claude-transcript' THEN 0 WHEN 'codex-rollout' THEN 0 WHEN 'gemini-chat' THEN 0
             WHEN 'otlp-log' THEN 1 WHEN 'otlp-metric' THEN 2 WHEN 'otlp-span' THEN 3 ELSE 4 END;

CREATE OR REPLACE TEMP TABLE match_pairs AS
WITH pairs AS (
    SELECT s.request_key AS s_key, r.request_key AS r_key, 0 AS how, s.source AS s_source, r.source AS r_source,
           s.is_sidechain AS s_side, r.is_sidechain AS r_side, s.output_tokens AS s_out, r.output_tokens AS r_out
    FROM staged s JOIN requests r ON r.request_key = s.request_key
    UNION ALL
    SELECT s.request_key, r.request_key, 1, s.source, r.source, s.is_sidechain, r.is_sidechain,
           s.output_tokens, r.output_tokens
    FROM staged s JOIN requests r ON r.message_id = s.message_id
    WHERE s.message_id IS NOT NULL AND r.request_key <> s.request_key
    UNION ALL
    -- the request id of a row stored under another key (a copy keyed by its message id that
    -- merged with one keyed by the request id)
    SELECT s.request_key, r.request_key, 1, s.source, r.source, s.is_sidechain, r.is_sidechain,
           s.output_tokens, r.output_tokens
    FROM staged s JOIN requests r ON r.request_id = s.request_id
    WHERE s.request_id IS NOT NULL AND r.request_key <> s.request_key
    UNION ALL
    -- The same request seen by two sources when one of them has no request id (gateways drop
    -- it; older events lack it): same agent and session, identical prompt-side counts (output
    -- differs between a transcript's copies), within 10 min (one stamps the start, one the end).
    SELECT s.request_key, r.request_key, 2, s.source, r.source, s.is_sidechain, r.is_sidechain,
           s.output_tokens, r.output_tokens
    FROM staged s JOIN requests r
      ON r.session_id = s.session_id AND r.agent = s.agent
     AND r.input_tokens = s.input_tokens AND r.cache_read_tokens = s.cache_read_tokens
     AND r.cache_write_5m_tokens + r.cache_write_1h_tokens + r.cache_write_unknown_tokens
         = s.cache_write_5m_tokens + s.cache_write_1h_tokens + s.cache_write_unknown_tokens
    WHERE r.source <> s.source AND r.request_key <> s.request_key
      AND (r.request_id IS NULL OR s.request_id IS NULL)
      AND abs(epoch(r.ts) - epoch(s.ts)) <= 600
)
SELECT * FROM pairs;

CREATE OR REPLACE TEMP TABLE matched AS
SELECT s_key, r_key,
       source_rank(s_source) < source_rank(r_source)
         OR (source_rank(s_source) = source_rank(r_source) AND s_source < r_source)
         OR (s_source = r_source AND ((r_side AND NOT s_side) OR (r_side = s_side AND s_out > r_out))) AS better,
       source_rank(s_source) AS s_rank
FROM match_pairs
QUALIFY row_number() OVER (PARTITION BY s_key ORDER BY how) = 1;
