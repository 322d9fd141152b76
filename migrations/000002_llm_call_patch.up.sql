-- The RFC 6902 patch a patch-strategy repair applied, so a reviewer sees
-- the diff. NULL for other calls.
ALTER TABLE llm_calls ADD COLUMN patch jsonb;
