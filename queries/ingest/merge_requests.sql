-- title: merge staged requests into the warehouse
-- description: one transaction's worth of parsed rows (view staged_in) merged idempotently.
--   One row per request: the key is the source request id, else the message id, else a content
--   hash; a copy that matches an existing row by key or message id is a duplicate. Between two
--   copies from the same source the better one wins (main thread over a sidechain replay, then
--   the larger output count, as transcripts write a response several times). A copy from another
--   source (a transcript of a request also seen as an OTLP event) never replaces the row: it
--   fills what the stored row lacks (TTFT, cost, duration, the 5m/1h split of a cache write,
--   the message id) and, from a transcript, the thread the request ran in; an event fills the
--   model, query source and thread of a row first stored from its trace span.
--   Reads view staged: the staged rows with one row per key and per message id (staged_in as
--   it is when already so, else ingest/merge_dedup's table), and temp table matched
--   (ingest/merge_match). Run only when some staged row matches a stored one.

-- A better copy under the same key replaces the stored values.
UPDATE requests AS r SET
    request_id = coalesce(s.request_id, r.request_id), message_id = coalesce(s.message_id, r.message_id),
    ts = s.ts, source = s.source, agent = s.agent, session_id = s.session_id, thread_id = s.thread_id,
    user_id = coalesce(s.user_id, r.user_id), org_id = coalesce(s.org_id, r.org_id),
    project = coalesce(s.project, r.project), model = s.model, query_source = coalesce(s.query_source, r.query_source),
    input_tokens = s.input_tokens, cache_read_tokens = s.cache_read_tokens,
    cache_write_5m_tokens = s.cache_write_5m_tokens, cache_write_1h_tokens = s.cache_write_1h_tokens,
    cache_write_unknown_tokens = s.cache_write_unknown_tokens, output_tokens = s.output_tokens,
    cost_usd = coalesce(s.cost_usd, r.cost_usd), duration_ms = coalesce(s.duration_ms, r.duration_ms),
    ttft_ms = coalesce(s.ttft_ms, r.ttft_ms), is_sidechain = s.is_sidechain,
    attributes = s.attributes, ingested_from = s.ingested_from
FROM staged s JOIN matched m ON m.s_key = s.request_key
WHERE r.request_key = m.r_key AND m.better AND m.r_key = m.s_key;

-- A better copy under another key (a sidechain replay stored first): drop the stored one.
DELETE FROM requests WHERE request_key IN (SELECT r_key FROM matched WHERE better AND r_key <> s_key);

-- A duplicate that is not better fills what the stored row lacks. Only rows that change are
-- updated: re-reading a file already stored (a rotated copy, --force) matches every row, and
-- rewriting 263 k unchanged rows took 13.6 s (measured).
UPDATE requests AS r SET
    request_id = f.request_id, message_id = f.message_id, ttft_ms = f.ttft_ms, cost_usd = f.cost_usd,
    duration_ms = f.duration_ms, project = f.project, thread_id = f.thread_id, query_source = f.query_source,
    model = f.model, is_sidechain = f.is_sidechain, cache_write_5m_tokens = f.cache_write_5m_tokens,
    cache_write_1h_tokens = f.cache_write_1h_tokens, cache_write_unknown_tokens = f.cache_write_unknown_tokens
FROM (
    SELECT *,
           coalesce(r_request_id, s_request_id) AS request_id, coalesce(r_message_id, s_message_id) AS message_id,
           coalesce(r_ttft_ms, s_ttft_ms) AS ttft_ms, coalesce(r_cost_usd, s_cost_usd) AS cost_usd,
           coalesce(r_duration_ms, s_duration_ms) AS duration_ms, coalesce(r_project, s_project) AS project,
           CASE WHEN from_transcript OR from_event THEN s_thread_id ELSE r_thread_id END AS thread_id,
           CASE WHEN from_event THEN coalesce(s_query_source, r_query_source)
                ELSE coalesce(r_query_source, s_query_source) END AS query_source,
           CASE WHEN from_event THEN coalesce(s_model, r_model) ELSE r_model END AS model,
           CASE WHEN from_transcript THEN s_is_sidechain ELSE r_is_sidechain END AS is_sidechain,
           CASE WHEN split THEN s_5m ELSE r_5m END AS cache_write_5m_tokens,
           CASE WHEN split THEN s_1h ELSE r_1h END AS cache_write_1h_tokens,
           CASE WHEN split THEN 0 ELSE r_unknown END AS cache_write_unknown_tokens
    FROM (
        SELECT m.r_key,
               s.request_id AS s_request_id, s.message_id AS s_message_id, s.ttft_ms AS s_ttft_ms,
               s.cost_usd AS s_cost_usd, s.duration_ms AS s_duration_ms, s.project AS s_project,
               s.thread_id AS s_thread_id, s.query_source AS s_query_source, s.model AS s_model,
               s.is_sidechain AS s_is_sidechain, s.cache_write_5m_tokens AS s_5m, s.cache_write_1h_tokens AS s_1h,
               rr.request_id AS r_request_id, rr.message_id AS r_message_id, rr.ttft_ms AS r_ttft_ms,
               rr.cost_usd AS r_cost_usd, rr.duration_ms AS r_duration_ms, rr.project AS r_project,
               rr.thread_id AS r_thread_id, rr.query_source AS r_query_source, rr.model AS r_model,
               rr.is_sidechain AS r_is_sidechain, rr.cache_write_5m_tokens AS r_5m, rr.cache_write_1h_tokens AS r_1h,
               rr.cache_write_unknown_tokens AS r_unknown,
               (rr.cache_write_unknown_tokens > 0 AND s.cache_write_unknown_tokens = 0
                AND s.cache_write_5m_tokens + s.cache_write_1h_tokens = rr.cache_write_unknown_tokens
                AND rr.cache_write_5m_tokens + rr.cache_write_1h_tokens = 0) AS split,
               (s.source = 'claude-transcript' AND rr.source <> s.source AND s.thread_id IS NOT NULL) AS from_transcript,
               -- a span stored first (traces ingested before logs) yields to its event: the span
               -- names the model as the client labels it ("...[1m]") and carries no query source
               (rr.source = 'otlp-span' AND s.source = 'otlp-log') AS from_event
        FROM staged s JOIN matched m ON m.s_key = s.request_key JOIN requests rr ON rr.request_key = m.r_key
        WHERE NOT m.better
        -- several staged copies matching one stored row (by key, and by message id): the one
        -- a batch would keep (main thread over sidechain, then the larger output) fills it
        QUALIFY row_number() OVER (PARTITION BY m.r_key
                                   ORDER BY s.is_sidechain, s.output_tokens DESC, s.request_key) = 1
    )
) f
WHERE r.request_key = f.r_key
  AND row(f.request_id, f.message_id, f.ttft_ms, f.cost_usd, f.duration_ms, f.project, f.thread_id,
          f.query_source, f.model, f.is_sidechain, f.cache_write_5m_tokens, f.cache_write_1h_tokens,
          f.cache_write_unknown_tokens)
      IS DISTINCT FROM row(f.r_request_id, f.r_message_id, f.r_ttft_ms, f.r_cost_usd, f.r_duration_ms, f.r_project,
          f.r_thread_id, f.r_query_source, f.r_model, f.r_is_sidechain, f.r_5m, f.r_1h, f.r_unknown);

INSERT INTO requests BY NAME
SELECT s.* FROM staged s
WHERE s.request_key NOT IN (SELECT s_key FROM matched WHERE NOT better OR r_key = s_key);
