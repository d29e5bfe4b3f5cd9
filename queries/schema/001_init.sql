-- title: initial warehouse schema
-- description: canonical one-row-per-model-request table, Claude Code metric points,
--   block-hash traces and the ledger of ingested files. Timestamps are UTC (TIMESTAMP = UTC).

CREATE TABLE IF NOT EXISTS requests (
    request_key                 VARCHAR PRIMARY KEY, -- source request id, else message id, else content hash
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

-- Claude Code token.usage (and other agents' token counters) as delta or cumulative points.
-- Used only for sessions that have no request rows (see view request_usage).
CREATE TABLE IF NOT EXISTS metric_points (
    point_key       VARCHAR PRIMARY KEY,  -- content hash: series + times + value
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

-- Block-hash traces (Mooncake, Alibaba Bailian): one row per request.
CREATE TABLE IF NOT EXISTS block_requests (
    trace           VARCHAR NOT NULL,     -- trace name (file stem or --trace)
    seq             BIGINT NOT NULL,      -- position in the trace file
    ts              TIMESTAMP NOT NULL,   -- UTC; relative traces start at 1970-01-01
    input_length    BIGINT NOT NULL,
    output_length   BIGINT NOT NULL,
    block_size      INTEGER NOT NULL,
    hash_ids        BIGINT[] NOT NULL,
    chat_id         VARCHAR,
    parent_chat_id  VARCHAR,
    turn            INTEGER,
    ingested_from   VARCHAR NOT NULL,
    PRIMARY KEY (trace, seq)
);

-- What was read, so a repeat ingest skips unchanged files.
CREATE TABLE IF NOT EXISTS ingested_files (
    path            VARCHAR NOT NULL,
    size            BIGINT NOT NULL,
    mtime_ns        BIGINT NOT NULL,
    format          VARCHAR NOT NULL,
    ingested_at     TIMESTAMP NOT NULL,
    rows_added      BIGINT NOT NULL,
    duplicates      BIGINT NOT NULL,
    lines_rejected  BIGINT NOT NULL,
    PRIMARY KEY (path, size, mtime_ns)
);
