-- Back to 000023's analyst_grant, with its list in code. The grants made
-- are the same either way, so none is revoked.
CREATE OR REPLACE FUNCTION analyst_grant(grantee name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), grantee);
    EXECUTE format('GRANT SELECT ON failing_fields, repair_effectiveness, failure_events, runs, batches TO %I', grantee);
    EXECUTE format('GRANT SELECT ON batch_summary, batch_cost, triage_backlog, field_failures, reply_failures, eval_results TO %I', grantee);
    EXECUTE format('GRANT SELECT ON qa_field_estimates TO %I', grantee);
    EXECUTE format('GRANT SELECT (%s) ON llm_calls TO %I',
        (SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
         FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'llm_calls' AND column_name NOT IN ('reply', 'stripped')),
        grantee);
END;
$$;

DROP TABLE analyst_grants;
DROP FUNCTION analyst_grants_apply();
