-- Back to the views of 000004, then drop the functions they read.
CREATE OR REPLACE VIEW failing_fields AS
SELECT f.schema_id,
       CASE WHEN f.path_pattern = '' THEN '/' ELSE f.path_pattern END AS path_pattern,
       f.kind,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired') AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
GROUP BY f.schema_id, f.path_pattern, f.kind;

-- Does the repair fix it: for each field path flagged at the first attempt,
-- how many of those runs ended valid after the one repair.
CREATE OR REPLACE VIEW repair_effectiveness AS
SELECT f.schema_id,
       CASE WHEN f.path_pattern = '' THEN '/' ELSE f.path_pattern END AS path_pattern,
       count(DISTINCT (f.message_id, f.run_no)) AS runs_flagged,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired') AS runs_repaired,
       round(100.0 * count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired')
             / nullif(count(DISTINCT (f.message_id, f.run_no)), 0), 1) AS repaired_pct
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.attempt = 1
GROUP BY f.schema_id, f.path_pattern;

DROP FUNCTION repair_effectiveness_since(timestamptz);
DROP FUNCTION failing_fields_since(timestamptz);
