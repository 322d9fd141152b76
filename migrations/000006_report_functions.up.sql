-- The analytics views for a time window: failing_fields_since(t) and
-- repair_effectiveness_since(t) count only the errors recorded at or
-- after t, so an analyst can ask "which fields fail most this week":
--
--   SELECT * FROM failing_fields_since(now() - interval '7 days');
--
-- The views are the same functions over all time, with the same columns.
-- Both are plain SQL functions, which the planner inlines into the query.

CREATE FUNCTION failing_fields_since(since timestamptz)
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

CREATE FUNCTION repair_effectiveness_since(since timestamptz)
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

CREATE OR REPLACE VIEW failing_fields AS
SELECT * FROM failing_fields_since('-infinity');

CREATE OR REPLACE VIEW repair_effectiveness AS
SELECT * FROM repair_effectiveness_since('-infinity');
