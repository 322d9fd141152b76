-- The analytics functions for one batch as well as a time window:
-- failing_fields_in(since, in_batch) and repair_effectiveness_in(since,
-- in_batch) count the errors recorded at or after since, of the runs of
-- batch in_batch (NULL: every batch), so an analyst can ask "which fields
-- fail most in the batch we ingested this morning":
--
--   SELECT * FROM failing_fields_in('-infinity', 'b-20261130-091500-1a2b3c');
--
-- The functions of 000006 and the views are these over every batch, with
-- the same columns. All are plain SQL functions, which the planner
-- inlines into the query, so a NULL batch costs nothing.

CREATE FUNCTION failing_fields_in(since timestamptz, in_batch text)
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
WHERE f.created_at >= since AND (in_batch IS NULL OR r.batch_id = in_batch)
GROUP BY f.schema_id, f.path_pattern, f.kind
$$;

CREATE FUNCTION repair_effectiveness_in(since timestamptz, in_batch text)
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
SELECT * FROM failing_fields_in(since, NULL)
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
SELECT * FROM repair_effectiveness_in(since, NULL)
$$;
