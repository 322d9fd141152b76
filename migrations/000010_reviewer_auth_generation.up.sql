-- A reviewer's sign-ins end when the account's password changes or the
-- account is disabled. Sessions are opaque to SQL (the session manager
-- keeps them encoded in sessions.data), so each session carries the
-- auth_generation its login saw, and the triage server ends a session
-- whose generation is no longer the account's: bumping it ends every
-- session of the account at once, in the transaction of the change. The
-- account's API tokens are revoked in that same transaction.
ALTER TABLE reviewers ADD COLUMN auth_generation bigint NOT NULL DEFAULT 0;
