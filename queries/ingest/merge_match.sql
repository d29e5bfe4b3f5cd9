-- title: staged requests that match a stored row
-- description: temp table matched(s_key, r_key, better): for each staged row (view staged, see
--   ingest/merge_requests) the stored row it duplicates, if any: by request key, else by message
--   id, else (a copy from another source without a request id) by agent, session, prompt-side
--   counts and time; better when it is a copy from the same source that should replace the stored
--   one. The statement's row count is the number of staged rows that match: when it is 0 the
--   pipeline inserts the staged rows as they are and skips ingest/merge_requests.

CREATE OR REPLACE TEMP TABLE matched AS
SELECT s_key, r_key, better FROM (
    SELECT s.request_key AS s_key, r.request_key AS r_key, 0 AS how,
           s.source = r.source AND ((r.is_sidechain AND NOT s.is_sidechain)
             OR (r.is_sidechain = s.is_sidechain AND s.output_tokens > r.output_tokens)) AS better
    FROM staged s JOIN requests r ON r.request_key = s.request_key
    UNION ALL
    SELECT s.request_key, r.request_key, 1,
           s.source = r.source AND ((r.is_sidechain AND NOT s.is_sidechain)
             OR (r.is_sidechain = s.is_sidechain AND s.output_tokens > r.output_tokens))
    FROM staged s JOIN requests r ON r.message_id = s.message_id
    WHERE s.message_id IS NOT NULL AND r.request_key <> s.request_key
    UNION ALL
    -- The same request seen by two sources when one of them has no request id (gateways drop
    -- it; older events lack it): same agent and session, identical prompt-side counts (output
    -- differs between a transcript's copies), within 10 min (one stamps the start, one the end).
    SELECT s.request_key, r.request_key, 2, false
    FROM staged s JOIN requests r
      ON r.session_id = s.session_id AND r.agent = s.agent
     AND r.input_tokens = s.input_tokens AND r.cache_read_tokens = s.cache_read_tokens
     AND r.cache_write_5m_tokens + r.cache_write_1h_tokens + r.cache_write_unknown_tokens
         = s.cache_write_5m_tokens + s.cache_write_1h_tokens + s.cache_write_unknown_tokens
    WHERE r.source <> s.source AND r.request_key <> s.request_key
      AND (r.request_id IS NULL OR s.request_id IS NULL)
      AND abs(epoch(r.ts) - epoch(s.ts)) <= 600
)
QUALIFY row_number() OVER (PARTITION BY s_key ORDER BY how) = 1;
