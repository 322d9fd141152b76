-- Back to the functions of 000006, then drop the batch ones they now read.
CREATE OR REPLACE FUNCTION failing_fields_since(since timestamptz)
RETURNS TABLE (
    schema_id         text,
    path_pattern      text,
    kind              text,
    errors            bigint,
    runs              bigint,
    first_pass_errors bigint,
    runs_repaired     bigint,
    runs_failed       bigint,
    first_seen        timestamptz,
    last_seen         timestamptz
)
LANGUAGE sql STABLE AS $$
SELECT f.schema_id,
       CASE WHEN f.path_pattern = '' THEN '/' ELSE f.path_pattern END,
       f.kind,
       count(*),
       count(DISTINCT (f.message_id, f.run_no)),
       count(*) FILTER (WHERE f.attempt = 1),
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired'),
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed'),
       min(f.created_at),
       max(f.created_at)
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.created_at >= since
GROUP BY f.schema_id, f.path_pattern, f.kind
$$;

CREATE OR REPLACE FUNCTION repair_effectiveness_since(since timestamptz)
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
WHERE f.attempt = 1 AND f.created_at >= since
GROUP BY f.schema_id, f.path_pattern
$$;

DROP FUNCTION repair_effectiveness_in(timestamptz, text);
DROP FUNCTION failing_fields_in(timestamptz, text);
