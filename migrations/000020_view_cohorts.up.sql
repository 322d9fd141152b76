-- Cohorts in the failure views (docs/views.md): field_failures and
-- reply_failures by the schema version, prompt version and model of the
-- call that made each error (failure_events keeps them per error), so an
-- analyst sees whether a prompt change moved a field's failures.
-- batch_cost has them since 000017. The columns are added at the end
-- (CREATE OR REPLACE VIEW may only add columns there); the other columns
-- and the filters are 000018's, and the rows are now one per cohort too.
-- CREATE OR REPLACE keeps the views' grants.
CREATE OR REPLACE VIEW field_failures AS
SELECT f.schema_id, f.path_pattern, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)) AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen,
       f.schema_version, f.prompt_version, f.model
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern <> ''
GROUP BY f.schema_id, f.path_pattern, f.kind, f.keyword, f.schema_version, f.prompt_version, f.model;

CREATE OR REPLACE VIEW reply_failures AS
SELECT f.schema_id, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)) AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen,
       f.schema_version, f.prompt_version, f.model
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern = ''
GROUP BY f.schema_id, f.kind, f.keyword, f.schema_version, f.prompt_version, f.model;
