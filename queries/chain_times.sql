-- title: times of the requests for prefix chains
-- description: the time (epoch µs) of every row of chain_requests, in no order, between $since
--   (inclusive) and $until (exclusive), UTC. Sorted, they number the chain rows: a row's place
--   in time order is the number of times before its own, plus its tie.
SELECT epoch_us(ts) AS ts_us FROM request_usage
WHERE ($since IS NULL OR ts >= CAST($since AS TIMESTAMP))
  AND ($until IS NULL OR ts < CAST($until AS TIMESTAMP))
