-- The human triage queue (cmd/triage): reviewer accounts, API tokens,
-- sessions, the audit log, the decision on each triage item, and the view
-- of each message's current result. See docs/triage.md.

-- People who review triage items. Accounts are made by `triage admin`;
-- password_hash is a bcrypt hash, never the password.
CREATE TABLE reviewers (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    login         text NOT NULL CHECK (login ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    display_name  text NOT NULL DEFAULT '',
    password_hash text NOT NULL,
    disabled_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT reviewers_login_key UNIQUE (login)
);

-- Tokens of tools using the JSON API. Only the SHA-256 of a token is kept;
-- the token itself is shown once, when made.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reviewer_id  bigint NOT NULL REFERENCES reviewers (id),
    name         text NOT NULL,
    token_hash   bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash)
);
CREATE INDEX api_tokens_reviewer_idx ON api_tokens (reviewer_id);

-- Web sessions, in the shape alexedwards/scs pgxstore reads (tokens are
-- stored hashed by the session manager).
CREATE TABLE sessions (
    token  text PRIMARY KEY,
    data   bytea NOT NULL,
    expiry timestamptz NOT NULL
);
CREATE INDEX sessions_expiry_idx ON sessions (expiry);

-- Every action of a person: who, what, when, before and after. Rows are
-- never changed or deleted (see the trigger below).
CREATE TABLE audit_log (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    actor          text NOT NULL,
    via            text NOT NULL CHECK (via IN ('ui', 'api', 'cli')),
    action         text NOT NULL,
    triage_item_id bigint REFERENCES triage_items (id),
    message_id     bigint,
    run_no         int,
    reason         text NOT NULL DEFAULT '',
    before         jsonb,
    after          jsonb
);
CREATE INDEX audit_log_item_idx ON audit_log (triage_item_id, at) WHERE triage_item_id IS NOT NULL;
CREATE INDEX audit_log_at_idx ON audit_log (at);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();

-- A reviewer's decision on a triage item: who, when, the written reason
-- (a rejection's reason, a grounding override's reason, a re-run's note)
-- and, for a re-run, the run it started.
ALTER TABLE triage_items
    ADD COLUMN decided_by      text,
    ADD COLUMN decided_at      timestamptz,
    ADD COLUMN decision_reason text NOT NULL DEFAULT '',
    ADD COLUMN rerun_no        int;
CREATE INDEX triage_items_claim_idx ON triage_items (claimed_by, claim_expires) WHERE status = 'open';

-- The current result of each message: its latest validated record, made
-- by the model (succeeded, repaired) or approved by a reviewer (human_made).
CREATE VIEW current_results AS
SELECT DISTINCT ON (e.message_id)
       e.message_id,
       m.source,
       m.external_id,
       e.run_no,
       e.schema_id,
       e.schema_version,
       e.outcome,
       e.data,
       e.evidence,
       e.created_by,
       e.created_at,
       (e.outcome = 'approved') AS human_made
FROM extractions e
JOIN messages m ON m.id = e.message_id
ORDER BY e.message_id, e.run_no DESC, e.id DESC;
