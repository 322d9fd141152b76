DROP VIEW IF EXISTS eval_results;
DROP TABLE IF EXISTS eval_fields;
DROP TABLE IF EXISTS eval_runs;
