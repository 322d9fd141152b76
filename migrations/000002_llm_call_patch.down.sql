ALTER TABLE llm_calls DROP COLUMN patch;
