-- Erasure of customer text: on a customer's request (retention erase) or
-- after a retention period (retention purge). See docs/retention.md for
-- what is removed and what is kept.
--
-- An erased message keeps its row, key (source, external_id), batch and
-- runs, so counts, costs and the failure analytics stay whole; its text,
-- metadata and content hash are removed, and erased_at/erased_by say when
-- and on whose word.
ALTER TABLE messages
    ADD COLUMN erased_at timestamptz,
    ADD COLUMN erased_by text;
CREATE INDEX messages_unerased_received_idx ON messages (received_at) WHERE erased_at IS NULL;
-- An erasure finds a message's audit entries by message id.
CREATE INDEX audit_log_message_idx ON audit_log (message_id) WHERE message_id IS NOT NULL;

-- No run is made for an erased message (an ingest of its key, a re-run):
-- it would extract an empty text. FOR SHARE waits for an erasure in
-- progress to commit and then reads the row it left.
CREATE FUNCTION runs_refuse_erased() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    erased timestamptz;
BEGIN
    SELECT erased_at INTO erased FROM messages WHERE id = NEW.message_id FOR SHARE;
    IF erased IS NOT NULL THEN
        RAISE EXCEPTION 'message % was erased at %; no run is made for it', NEW.message_id, erased
            USING ERRCODE = 'EQ001';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER runs_refuse_erased BEFORE INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_refuse_erased();

-- The audit log stays append-only, with one exception: while a
-- transaction has set extractq.erasing to 'on' (SET LOCAL, as the store's
-- erasure does), an update may blank a row's reason, before and after
-- (which may quote the customer's text): reason becomes '', before and
-- after NULL, and nothing else changes. Rows are never deleted.
CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND coalesce(current_setting('extractq.erasing', true), '') = 'on'
       AND NEW.id = OLD.id AND NEW.at = OLD.at AND NEW.actor = OLD.actor
       AND NEW.via = OLD.via AND NEW.action = OLD.action
       AND NEW.triage_item_id IS NOT DISTINCT FROM OLD.triage_item_id
       AND NEW.message_id IS NOT DISTINCT FROM OLD.message_id
       AND NEW.run_no IS NOT DISTINCT FROM OLD.run_no
       AND NEW.reason = '' AND NEW.before IS NULL AND NEW.after IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
