-- Back to an audit log that refuses every update. Erased messages stay
-- erased: their text is gone.
CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
DROP TRIGGER runs_refuse_erased ON runs;
DROP FUNCTION runs_refuse_erased();
DROP INDEX audit_log_message_idx;
DROP INDEX messages_unerased_received_idx;
ALTER TABLE messages
    DROP COLUMN erased_by,
    DROP COLUMN erased_at;
