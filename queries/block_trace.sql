-- title: block-hash trace requests
-- description: the requests of the ingested block-hash traces (Mooncake, Bailian), optionally one
--   $trace, between $since (inclusive) and $until (exclusive), UTC; NULL parameters are open.
--   Ordered by time, then trace and position in the file, the order every reuse analysis uses.
SELECT trace, seq, epoch_us(ts) AS ts_us, input_length, output_length, block_size, hash_ids,
       chat_id, parent_chat_id, turn
FROM block_requests
WHERE ($trace IS NULL OR trace = $trace)
  AND ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
ORDER BY ts, trace, seq
