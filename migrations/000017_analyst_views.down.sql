DROP VIEW IF EXISTS reply_failures;
DROP VIEW IF EXISTS field_failures;
DROP VIEW IF EXISTS triage_backlog;
DROP VIEW IF EXISTS batch_cost;
DROP VIEW IF EXISTS batch_summary;
