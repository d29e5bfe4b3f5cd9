-- title: requests and metric_points without a primary-key index
-- description: the keys stay unique (the ingest merge anti-joins on them, and one process writes
--   at a time), but no longer through an ART index: the index cost more than the rest of a
--   bulk insert (+0.15 s per 262 k requests, +0.5 s at commit, measured) and memory on every
--   open, while the merge's joins scan the key column anyway. Both tables are rebuilt with the
--   same columns, types and defaults; their rows are copied as they are.

CREATE TABLE requests_unindexed (
    request_key                 VARCHAR NOT NULL,    -- source request id, else message id, else content hash; unique by the merge
    request_id                  VARCHAR,             -- req_... from the API when known
    message_id                  VARCHAR,             -- msg_... (transcripts) when known
    ts                          TIMESTAMP NOT NULL,  -- UTC, microseconds
    source                      VARCHAR NOT NULL,    -- otlp-log, otlp-span, claude-transcript, codex-rollout, ...
    agent                       VARCHAR NOT NULL,    -- claude-code, codex, gemini-cli, genai, ...
    session_id                  VARCHAR,
    thread_id                   VARCHAR,             -- 'main' or the subagent / sidechain id
    user_id                     VARCHAR,
    org_id                      VARCHAR,
    project                     VARCHAR,
    model                       VARCHAR,
    query_source                VARCHAR,             -- main | subagent | auxiliary (raw value in attributes)
    input_tokens                BIGINT NOT NULL DEFAULT 0, -- uncached input only
    cache_read_tokens           BIGINT NOT NULL DEFAULT 0,
    cache_write_5m_tokens       BIGINT NOT NULL DEFAULT 0,
    cache_write_1h_tokens       BIGINT NOT NULL DEFAULT 0,
    cache_write_unknown_tokens  BIGINT NOT NULL DEFAULT 0, -- a write whose TTL split the source does not give
    output_tokens               BIGINT NOT NULL DEFAULT 0,
    cost_usd                    DOUBLE,
    duration_ms                 DOUBLE,
    ttft_ms                     DOUBLE,
    is_sidechain                BOOLEAN NOT NULL DEFAULT false,
    attributes                  JSON,
    ingested_from               VARCHAR NOT NULL      -- file:line or spool segment:line
);
INSERT INTO requests_unindexed SELECT * FROM requests;
DROP TABLE requests;
ALTER TABLE requests_unindexed RENAME TO requests;

CREATE TABLE metric_points_unindexed (
    point_key       VARCHAR NOT NULL,     -- content hash: series + times + value; unique by the merge
    metric          VARCHAR NOT NULL,
    series_key      VARCHAR NOT NULL,     -- hash of resource + point attributes
    temporality     SMALLINT NOT NULL,    -- 1 delta, 2 cumulative
    start_ts        TIMESTAMP,
    ts              TIMESTAMP NOT NULL,
    value           DOUBLE NOT NULL,
    token_type      VARCHAR NOT NULL,     -- input | output | cacheRead | cacheCreation (as sent)
    source          VARCHAR NOT NULL,
    agent           VARCHAR NOT NULL,
    session_id      VARCHAR,
    user_id         VARCHAR,
    org_id          VARCHAR,
    model           VARCHAR,
    query_source    VARCHAR,
    attributes      JSON,
    ingested_from   VARCHAR NOT NULL
);
INSERT INTO metric_points_unindexed SELECT * FROM metric_points;
DROP TABLE metric_points;
ALTER TABLE metric_points_unindexed RENAME TO metric_points;
