-- Roles (docs/triage.md, "Roles"). Every account has one: admin (accounts,
-- tokens, bulk re-runs, erasures, the audit log, and all a reviewer may),
-- reviewer (works the queue), analyst (reports and aggregate views, never
-- customer text). The accounts made before roles had every power: they
-- become admin, so that no one loses what they did at the upgrade; an
-- admin then narrows them (`triage admin set-role`). New accounts are
-- reviewers unless made otherwise.
ALTER TABLE reviewers ADD COLUMN role text NOT NULL DEFAULT 'admin'
    CONSTRAINT reviewers_role_check CHECK (role IN ('admin', 'reviewer', 'analyst'));
ALTER TABLE reviewers ALTER COLUMN role SET DEFAULT 'reviewer';

-- An API token carries a role too: its account's, or a narrower one; and
-- ingest, for the programs that feed `ingest serve` (an admin's tokens
-- only). The tokens made before roles were all-powerful: they become
-- admin, as their accounts do.
ALTER TABLE api_tokens ADD COLUMN role text NOT NULL DEFAULT 'admin'
    CONSTRAINT api_tokens_role_check CHECK (role IN ('admin', 'reviewer', 'analyst', 'ingest'));
ALTER TABLE api_tokens ALTER COLUMN role DROP DEFAULT;

-- The Postgres role of analysts' BI tools (docs/reports.md, "BI tools"):
-- extractq_analyst, a NOLOGIN group role whose members may read the report
-- views and the tables and columns holding no customer text, in this schema
-- only.
-- Roles are the cluster's, not the schema's: the role is made once, by the
-- first schema migrated, and shared by the others (a second migrator at the
-- same moment finds it made). A migrator without CREATEROLE cannot make it:
-- it warns, and analyst_grant grants the same to a role made later.
CREATE FUNCTION analyst_grant(grantee name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), grantee);
    -- The report views, and what their functions (failing_fields_in, ...)
    -- read: failure_events holds error paths and kinds, never values; runs
    -- and batches hold ids, states and times.
    EXECUTE format('GRANT SELECT ON failing_fields, repair_effectiveness, failure_events, runs, batches TO %I', grantee);
    -- llm_calls without the replies (reply, stripped: the model's words,
    -- which quote the customer): repair_effectiveness_in reads which runs
    -- got a repair call, and the columns left are tokens, cost and times.
    EXECUTE format('GRANT SELECT (%s) ON llm_calls TO %I',
        (SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
         FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'llm_calls' AND column_name NOT IN ('reply', 'stripped')),
        grantee);
END;
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst') THEN
        BEGIN
            CREATE ROLE extractq_analyst NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- made by another schema's migration at the same moment
            WHEN insufficient_privilege THEN
                RAISE WARNING 'role extractq_analyst not made: the migrating user lacks CREATEROLE; '
                    'make it (CREATE ROLE extractq_analyst NOLOGIN) and run SELECT analyst_grant(''extractq_analyst'') in schema %', current_schema();
                RETURN;
        END;
    END IF;
    PERFORM analyst_grant('extractq_analyst');
END;
$$;
