-- Back to runs without the relay's columns. Dedup ids already random stay
-- as they are; new runs get 'msg-<id>-run-<n>' from the code of before.
DROP INDEX runs_relay_check_idx;

ALTER TABLE runs
    ALTER COLUMN dedup_id DROP DEFAULT,
    DROP COLUMN stream_seq,
    DROP COLUMN relay_checked_at,
    DROP COLUMN relay_gen,
    DROP COLUMN lease_owner,
    DROP COLUMN lease_seq,
    DROP COLUMN leased_until;
