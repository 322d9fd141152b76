-- Back to one current result per message, whatever its schema.
CREATE OR REPLACE VIEW current_results AS
SELECT DISTINCT ON (e.message_id)
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
ORDER BY e.message_id, e.run_no DESC, e.id DESC;
