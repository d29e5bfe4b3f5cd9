-- title: OTLP JSON lines: classify each line
-- description: the rows of temp table otlp_line_class (each chunk's are appended), one row per
--   line of view otlp_lines(line_no, line): which signals it carries (bit 1 logs, 2 metrics, 4
--   spans) or why it is rejected (blank lines are neither). One parse per line (json_type takes
--   every path at once); whatever else reads a whole line runs only on the rare lines that need it.
--   A snake_case key whose value is null counts as absent, as it does for ingest/otlp_logs.
--   The normalization queries then read only the lines of their signal, known to be valid.

WITH typed AS (
    -- try(): NULL for a line that is not JSON, without a separate validation pass.
    SELECT line_no, line, try(json_type(line, ['$', '$.resourceLogs', '$.resourceMetrics',
               '$.resourceSpans', '$.resource_logs', '$.resource_metrics', '$.resource_spans'])) AS t
    FROM otlp_lines
), shaped AS (
    SELECT line_no, t, t IS NOT NULL AS valid,
           CASE WHEN t IS NULL THEN trim(line, ' ' || chr(9) || chr(10) || chr(13)) = '' END AS blank,
           CASE WHEN t[1] = 'OBJECT' AND t[2] IS NULL AND t[3] IS NULL AND t[4] IS NULL
                THEN json_keys(line) = [] END AS empty_object
    FROM typed
)
SELECT line_no,
       CASE WHEN valid AND t[1] = 'OBJECT'
            THEN (CASE WHEN t[2] = 'ARRAY' THEN 1 ELSE 0 END)
               + (CASE WHEN t[3] = 'ARRAY' THEN 2 ELSE 0 END)
               + (CASE WHEN t[4] = 'ARRAY' THEN 4 ELSE 0 END)
            ELSE 0 END AS signals,
       CASE
           WHEN blank THEN NULL
           WHEN NOT valid THEN 'invalid JSON'
           WHEN t[1] <> 'OBJECT' THEN 'not a JSON object (an OTLP export request is an object)'
           WHEN t[2] NOT IN ('ARRAY', 'NULL') THEN 'expected an array, found ' || lower(t[2])
           WHEN t[3] NOT IN ('ARRAY', 'NULL') THEN 'expected an array, found ' || lower(t[3])
           WHEN t[4] NOT IN ('ARRAY', 'NULL') THEN 'expected an array, found ' || lower(t[4])
           WHEN coalesce(nullif(t[5], 'NULL'), nullif(t[6], 'NULL'), nullif(t[7], 'NULL')) IS NOT NULL
               THEN 'snake_case keys are not OTLP JSON (its keys are lowerCamelCase: resourceLogs, ...)'
           WHEN NOT empty_object
               THEN 'not an OTLP export request (no resourceLogs, resourceMetrics or resourceSpans)'
       END AS reason,
       CASE
           WHEN NOT valid OR t[1] <> 'OBJECT' THEN NULL
           WHEN t[2] NOT IN ('ARRAY', 'NULL') THEN 'resourceLogs'
           WHEN t[3] NOT IN ('ARRAY', 'NULL') THEN 'resourceMetrics'
           WHEN t[4] NOT IN ('ARRAY', 'NULL') THEN 'resourceSpans'
           WHEN t[5] <> 'NULL' THEN 'resource_logs'
           WHEN t[6] <> 'NULL' THEN 'resource_metrics'
           WHEN t[7] <> 'NULL' THEN 'resource_spans'
       END AS field,
       coalesce(blank, false) AS blank
FROM shaped
