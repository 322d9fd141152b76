DROP VIEW IF EXISTS current_results;
DROP INDEX IF EXISTS triage_items_claim_idx;
ALTER TABLE triage_items
    DROP COLUMN IF EXISTS rerun_no,
    DROP COLUMN IF EXISTS decision_reason,
    DROP COLUMN IF EXISTS decided_at,
    DROP COLUMN IF EXISTS decided_by;
DROP TABLE IF EXISTS audit_log;
DROP FUNCTION IF EXISTS audit_log_append_only();
DROP TABLE IF EXISTS sessions;
DROP TABLE IF EXISTS api_tokens;
DROP TABLE IF EXISTS reviewers;
