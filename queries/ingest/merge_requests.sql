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

-- A duplicate that is not better fills what the stored row lacks.
UPDATE requests AS r SET
    request_id = coalesce(r.request_id, s.request_id), message_id = coalesce(r.message_id, s.message_id),
    ttft_ms = coalesce(r.ttft_ms, s.ttft_ms), cost_usd = coalesce(r.cost_usd, s.cost_usd),
    duration_ms = coalesce(r.duration_ms, s.duration_ms), project = coalesce(r.project, s.project),
    thread_id = CASE WHEN from_transcript OR from_event THEN s.thread_id ELSE r.thread_id END,
    query_source = CASE WHEN from_event THEN coalesce(s.query_source, r.query_source)
                        ELSE coalesce(r.query_source, s.query_source) END,
    model = CASE WHEN from_event THEN coalesce(s.model, r.model) ELSE r.model END,
    is_sidechain = CASE WHEN from_transcript THEN s.is_sidechain ELSE r.is_sidechain END,
    cache_write_5m_tokens = CASE WHEN split THEN s.cache_write_5m_tokens ELSE r.cache_write_5m_tokens END,
    cache_write_1h_tokens = CASE WHEN split THEN s.cache_write_1h_tokens ELSE r.cache_write_1h_tokens END,
    cache_write_unknown_tokens = CASE WHEN split THEN 0 ELSE r.cache_write_unknown_tokens END
FROM (
    SELECT s.*, m.r_key,
           (rr.cache_write_unknown_tokens > 0 AND s.cache_write_unknown_tokens = 0
            AND s.cache_write_5m_tokens + s.cache_write_1h_tokens = rr.cache_write_unknown_tokens
            AND rr.cache_write_5m_tokens + rr.cache_write_1h_tokens = 0) AS split,
           (s.source = 'claude-transcript' AND rr.source <> s.source AND s.thread_id IS NOT NULL) AS from_transcript,
           -- a span stored first (traces ingested before logs) yields to its event: the span
           -- names the model as the client labels it ("...[1m]") and carries no query source
           (rr.source = 'otlp-span' AND s.source = 'otlp-log') AS from_event
    FROM staged s JOIN matched m ON m.s_key = s.request_key JOIN requests rr ON rr.request_key = m.r_key
    WHERE NOT m.better
) s
WHERE r.request_key = s.r_key;

INSERT INTO requests BY NAME
SELECT s.* FROM staged s
WHERE s.request_key NOT IN (SELECT s_key FROM matched WHERE NOT better OR r_key = s_key);
