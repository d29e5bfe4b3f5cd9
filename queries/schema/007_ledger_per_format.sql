-- title: the ledger keys a file's read by its format too, and says whether the format was forced
-- description: a file read under a forced --format (perhaps the wrong one) no longer hides it
--   from later ingests: the key is (path, size, mtime_ns, format), so a read under another
--   format is a row of its own; forced tells a read under --format from one under the detected
--   format. A plain ingest skips an unchanged file that has a detected row, or a forced row of
--   the format it detects; an ingest with --format skips one that has a row of that format.
--   Rows written before this version are taken as detected.

CREATE TABLE ingested_files_by_format (
    path            VARCHAR NOT NULL,
    size            BIGINT NOT NULL,
    mtime_ns        BIGINT NOT NULL,
    format          VARCHAR NOT NULL,
    ingested_at     TIMESTAMP NOT NULL,
    rows_added      BIGINT NOT NULL,
    duplicates      BIGINT NOT NULL,
    lines_rejected  BIGINT NOT NULL,
    read_to         BIGINT,
    lines_read      BIGINT,
    tail_sha256     VARCHAR,
    forced          BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (path, size, mtime_ns, format)
);
INSERT INTO ingested_files_by_format
SELECT path, size, mtime_ns, format, ingested_at, rows_added, duplicates, lines_rejected,
       read_to, lines_read, tail_sha256, false
FROM ingested_files;
DROP TABLE ingested_files;
ALTER TABLE ingested_files_by_format RENAME TO ingested_files;
