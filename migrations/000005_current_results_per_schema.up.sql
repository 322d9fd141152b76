-- A message may be extracted with more than one schema (ingested again
-- with another -schema): its current result is per schema, the latest
-- validated record of that schema, made by the model (succeeded,
-- repaired) or approved by a reviewer (human_made).
CREATE OR REPLACE VIEW current_results AS
SELECT DISTINCT ON (e.message_id, e.schema_id)
       e.message_id,
       m.source,
       m.external_id,
       e.run_no,
       e.schema_id,
       e.schema_version,
       e.outcome,
       e.data,
       e.evidence,
       e.created_by,
       e.created_at,
       (e.outcome = 'approved') AS human_made
FROM extractions e
JOIN messages m ON m.id = e.message_id
ORDER BY e.message_id, e.schema_id, e.run_no DESC, e.id DESC;
