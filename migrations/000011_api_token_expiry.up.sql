-- API tokens expire. Every token has an expiry, chosen when it is made
-- (`triage admin token create -expires-in`, 90 days by default); a token
-- past it is refused. Tokens made before this migration expire 90 days
-- after it, so that no script stops at the upgrade.
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
UPDATE api_tokens SET expires_at = now() + interval '90 days';
ALTER TABLE api_tokens
    ALTER COLUMN expires_at SET NOT NULL,
    ADD CONSTRAINT api_tokens_expires_after_created CHECK (expires_at > created_at);
