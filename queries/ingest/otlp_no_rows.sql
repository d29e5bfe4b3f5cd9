-- title: OTLP JSON: the stand-in for a temp table no chunk filled
-- description: an empty table with the columns the final queries (otlp_requests, otlp_points,
--   otlp_unknown, otlp_rejects) name, for a signal no line carried, or for otlp_line_class when
--   no chunk needed classifying; their UNION ALL BY NAME takes the other columns from the tables
--   that were filled. Cheaper than planning the table's query on no lines (15-40 ms each).

SELECT CAST(NULL AS BIGINT) AS line_no, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS BIGINT) AS n,
       CAST(NULL AS BOOLEAN) AS out, CAST(NULL AS VARCHAR) AS reject_field,
       CAST(NULL AS VARCHAR) AS reject_reason, CAST(NULL AS VARCHAR) AS request_key,
       CAST(NULL AS VARCHAR) AS point_key, CAST(NULL AS DOUBLE) AS ttft_ms,
       CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS DOUBLE) AS cost_usd,
       CAST(NULL AS VARCHAR) AS reason, CAST(NULL AS VARCHAR) AS field
LIMIT 0
