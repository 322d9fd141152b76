-- What the Postgres role extractq_analyst (000015, docs/reports.md, "BI
-- tools") may read, as rows rather than code: 000021 and 000023 each
-- rewrote analyst_grant whole to add a view. A new report view now adds
-- one row here in its migration (the trigger analyst_grants_apply grants
-- it to the role), and analyst_grant stays as it is.
--
-- One row a relation of this schema. withheld names the columns not
-- granted: empty grants the whole relation, otherwise every other column
-- (as they are when analyst_grant runs). why says what the relation holds
-- that makes it fit for analysts: counts, costs, kinds, ids and times,
-- never customer text (messages, extractions, triage_items, audit_log,
-- current_results, the QA samples and the model's replies are never
-- listed; TestAnalystGrants checks it). A view reads its tables with its
-- owner's rights, so granting a view does not open the tables it counts.
CREATE TABLE analyst_grants (
    relation name PRIMARY KEY,
    withheld name[] NOT NULL DEFAULT '{}',
    why      text NOT NULL
);

-- analyst_grant grants grantee USAGE on this schema and SELECT on each
-- relation of analyst_grants (on its columns but the withheld ones, where
-- some are). It grants only: a row deleted is revoked by hand.
CREATE OR REPLACE FUNCTION analyst_grant(grantee name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    g analyst_grants;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), grantee);
    FOR g IN SELECT * FROM analyst_grants ORDER BY relation LOOP
        IF cardinality(g.withheld) = 0 THEN
            EXECUTE format('GRANT SELECT ON %I TO %I', g.relation, grantee);
        ELSE
            EXECUTE format('GRANT SELECT (%s) ON %I TO %I',
                (SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
                 FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = g.relation
                   AND column_name <> ALL (g.withheld)),
                g.relation, grantee);
        END IF;
    END LOOP;
END;
$$;

-- Rows written are granted to extractq_analyst at once, when the role
-- exists (a role made later, or another role, takes analyst_grant by
-- hand, as 000015 says).
CREATE FUNCTION analyst_grants_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst') THEN
        PERFORM analyst_grant('extractq_analyst');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER analyst_grants_apply AFTER INSERT OR UPDATE ON analyst_grants
    FOR EACH STATEMENT EXECUTE FUNCTION analyst_grants_apply();

INSERT INTO analyst_grants (relation, withheld, why) VALUES
    ('failing_fields', '{}', 'report view (000001, docs/reports.md): error paths and kinds, counted'),
    ('repair_effectiveness', '{}', 'report view (000001, docs/reports.md): repair calls and their outcomes, counted'),
    ('failure_events', '{}', 'read by the report views'' functions: error paths and kinds, never values'),
    ('runs', '{}', 'read by the report views'' functions: ids, states and times'),
    ('batches', '{}', 'read by the report views'' functions: ids, states and times'),
    ('llm_calls', '{reply,stripped}', 'read by repair_effectiveness_in: tokens, cost, latency, model, versions; '
        'not reply or stripped, the model''s words, which quote the customer'),
    ('batch_summary', '{}', 'analyst view (000017, docs/views.md): counts and cost per batch'),
    ('batch_cost', '{}', 'analyst view (000017): calls, runs and cost per batch and cohort'),
    ('triage_backlog', '{}', 'analyst view (000017): open triage items, counted'),
    ('field_failures', '{}', 'analyst view (000017, 000020): field errors by path and kind, counted'),
    ('reply_failures', '{}', 'analyst view (000017, 000020): whole-reply errors by kind, counted'),
    ('eval_results', '{}', 'eval view (000016, docs/views.md): scores per eval run and field'),
    ('qa_field_estimates', '{}', 'analyst view (000023): false-accept rates, never values');
