-- Back to migration 000009's repair_effectiveness_in, and llm_calls
-- without the ledger's columns.
CREATE OR REPLACE FUNCTION repair_effectiveness_in(since timestamptz, in_batch text)
RETURNS TABLE (
    schema_id     text,
    path_pattern  text,
    runs_flagged  bigint,
    runs_repaired bigint,
    repaired_pct  numeric
)
LANGUAGE sql STABLE AS $$
SELECT f.schema_id,
       CASE WHEN f.path_pattern = '' THEN '/' ELSE f.path_pattern END,
       count(DISTINCT (f.message_id, f.run_no)),
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired'),
       round(100.0 * count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired')
             / nullif(count(DISTINCT (f.message_id, f.run_no)), 0), 1)
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.attempt = 1 AND f.created_at >= since AND (in_batch IS NULL OR r.batch_id = in_batch)
  AND EXISTS (SELECT 1 FROM llm_calls c
              WHERE c.message_id = f.message_id AND c.run_no = f.run_no AND c.purpose = 'repair')
GROUP BY f.schema_id, f.path_pattern
$$;

ALTER TABLE llm_calls
    DROP COLUMN cached_tokens,
    DROP COLUMN usage_estimated,
    DROP COLUMN superseded,
    DROP COLUMN http_status,
    DROP COLUMN reply_bytes;
