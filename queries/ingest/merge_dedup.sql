-- title: one staged copy per key and per message id
-- description: the rows of temp table staged_dedup: staged_in (one transaction's parsed rows)
--   with one row per request key and then one per message id, the better copy winning (main
--   thread over a sidechain replay, then the larger output: transcripts write a response several
--   times). Run only when staged_in repeats a key (the pipeline checks first): the two window
--   passes cost more than the rest of the merge of a large file.

CREATE OR REPLACE TEMP TABLE staged_dedup AS
SELECT * FROM staged_in
QUALIFY row_number() OVER (PARTITION BY request_key
                           ORDER BY is_sidechain, output_tokens DESC, ingested_from) = 1;

CREATE OR REPLACE TEMP TABLE staged_dedup AS
SELECT * FROM staged_dedup
QUALIFY row_number() OVER (PARTITION BY coalesce(message_id, request_key)
                           ORDER BY is_sidechain, output_tokens DESC, ingested_from) = 1;
