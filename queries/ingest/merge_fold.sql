-- title: stored copies of one request, found through a staged copy
-- description: temp table fold_out(request_key): after ingest/merge_requests, a staged copy
--   that matched two stored rows (one by request id, the other by message id: a sidechain replay
--   under a request id of its own, stored before the main-thread copy that links the two) shows
--   that they are one request (by request key, message id or request id; a match by counts alone
--   links nothing). Of each such group still stored, the row of second rank (the
--   order of ingest/merge_match: source rank, the main thread over a sidechain, the larger
--   output) is listed: the pipeline takes it out and merges it again as a staged copy, until no
--   group has two rows, so every order of arrival ends in one row. Reads temp table match_pairs.

CREATE OR REPLACE TEMP TABLE fold_out AS
WITH ids AS (             -- matches by an id only: a match by counts is a guess, never a link
    SELECT s_key, r_key FROM match_pairs WHERE how < 2
),
groups AS (
    SELECT s_key, r_key AS request_key FROM ids
    UNION
    SELECT s_key, s_key FROM ids
),
linked AS (
    SELECT s_key FROM ids GROUP BY s_key HAVING count(DISTINCT r_key) > 1
),
stored AS (
    SELECT g.s_key, r.request_key,
           row_number() OVER (PARTITION BY g.s_key
                              ORDER BY source_rank(r.source), r.source, r.is_sidechain, r.output_tokens DESC,
                                       r.request_key) AS place
    FROM groups g JOIN linked USING (s_key) JOIN requests r ON r.request_key = g.request_key
)
SELECT DISTINCT request_key FROM stored WHERE place = 2;
