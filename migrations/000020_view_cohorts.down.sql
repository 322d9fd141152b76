-- The failure views of 000018, without cohort columns: a column cannot
-- be dropped by CREATE OR REPLACE, so the views are made again (no grant
-- names them: analyst_grant, 000015, predates them).
DROP VIEW reply_failures;
DROP VIEW field_failures;
CREATE VIEW field_failures AS
SELECT f.schema_id, f.path_pattern, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)) AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern <> ''
GROUP BY f.schema_id, f.path_pattern, f.kind, f.keyword;

CREATE VIEW reply_failures AS
SELECT f.schema_id, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)) AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern = ''
GROUP BY f.schema_id, f.kind, f.keyword;
