-- Back to counting every run whose first reply had an error at the path
-- (migration 000007).
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
GROUP BY f.schema_id, f.path_pattern
$$;
