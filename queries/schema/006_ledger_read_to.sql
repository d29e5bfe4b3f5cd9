-- title: the ledger remembers how far a file was read
-- description: a file that only grew since it was ingested (an OTLP JSON lines file a Collector
--   or SDK exporter keeps appending to) is read from where the last ingest stopped instead of
--   from the start. read_to is the byte offset just after the last whole line read, lines_read
--   the number of lines before it, tail_sha256 the SHA-256 of the (up to) 4 KiB before read_to,
--   which must still be there for the file to count as grown rather than rewritten. NULL for
--   files read before this version and for formats read whole.

ALTER TABLE ingested_files ADD COLUMN IF NOT EXISTS read_to BIGINT;
ALTER TABLE ingested_files ADD COLUMN IF NOT EXISTS lines_read BIGINT;
ALTER TABLE ingested_files ADD COLUMN IF NOT EXISTS tail_sha256 VARCHAR;
