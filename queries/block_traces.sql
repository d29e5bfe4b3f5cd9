-- title: block-hash traces in the warehouse
-- description: one row per ingested block-hash trace: requests, time span, block size, tokens.
SELECT trace, count(*) AS requests, min(ts) AS first_ts, max(ts) AS last_ts,
       min(block_size) AS block_size, max(block_size) AS max_block_size,
       sum(input_length) AS input_tokens, sum(len(hash_ids)) AS blocks
FROM block_requests
GROUP BY trace
ORDER BY trace
