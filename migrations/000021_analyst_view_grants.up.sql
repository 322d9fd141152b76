-- The views of 000017 (docs/views.md) are for analysts, but analyst_grant
-- of 000015 predates them: extractq_analyst could not read them. They
-- hold counts, costs and error kinds, never customer text (a view reads
-- its tables with its owner's rights, so triage_backlog's counts of
-- triage_items do not open triage_items itself). analyst_grant now grants
-- them too, and is run again for the role if it exists.
CREATE OR REPLACE FUNCTION analyst_grant(grantee name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), grantee);
    EXECUTE format('GRANT SELECT ON failing_fields, repair_effectiveness, failure_events, runs, batches TO %I', grantee);
    EXECUTE format('GRANT SELECT ON batch_summary, batch_cost, triage_backlog, field_failures, reply_failures, eval_results TO %I', grantee);
    EXECUTE format('GRANT SELECT (%s) ON llm_calls TO %I',
        (SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
         FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'llm_calls' AND column_name NOT IN ('reply', 'stripped')),
        grantee);
END;
$$;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst') THEN
        PERFORM analyst_grant('extractq_analyst');
    END IF;
END;
$$;
