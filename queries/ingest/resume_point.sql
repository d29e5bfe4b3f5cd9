-- title: where a grown file's last ingest stopped
-- description: the ledger row of $path (read as $format) that read furthest without passing the
--   file's current $size: its byte offset after the last whole line, the lines before it, and
--   the SHA-256 of the (up to) 4 KiB before it, which must still match for a resumed read.

SELECT read_to, lines_read, tail_sha256
FROM ingested_files
WHERE path = $path AND format = $format AND read_to IS NOT NULL AND read_to <= $size
ORDER BY read_to DESC
LIMIT 1
