-- The role extractq_analyst stays: other schemas of the cluster may use it.
-- Only this schema's grants to it go.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst') THEN
        REVOKE SELECT ON failing_fields, repair_effectiveness, failure_events, runs, batches, llm_calls FROM extractq_analyst;
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM extractq_analyst', current_schema());
    END IF;
END;
$$;
DROP FUNCTION analyst_grant(name);
ALTER TABLE api_tokens DROP COLUMN role;
ALTER TABLE reviewers DROP COLUMN role;
