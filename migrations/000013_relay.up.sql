-- The relay from Postgres to JetStream (package relay; docs/operations.md,
-- "The relay"). Each run row says what the stream must hold for it:
--
--   dedup_id          now random ('run-' and a version 4 UUID, 122 random
--                     bits), set at insert and the same on every publish of
--                     the run, so a database restored from a backup never
--                     hands out an id the stream saw within its dedup
--                     window (the old 'msg-<id>-run-<n>' repeated then).
--                     Rows written before this migration keep theirs;
--   stream_seq        the stream sequence of the latest copy of the run the
--                     relay saw stored (a first publish, a sweep, a requeue,
--                     a reconciler republish); NULL before the first, and on
--                     rows published before this migration;
--   relay_checked_at  when the relay last knew that copy was on the stream
--                     (stored, or found by the reconciler);
--   relay_gen         how many times the reconciler republished the run; a
--                     republish's Nats-Msg-Id is dedup_id '.r' relay_gen, so
--                     the stream never drops it as a copy of a lost one;
--   lease_owner,      the worker working on the run now, the stream
--   lease_seq,        sequence of the copy it works on, and until when its
--   leased_until      lease holds (extended while it works). Another copy
--                     delivered meanwhile is acked without a provider call.
ALTER TABLE runs
    ALTER COLUMN dedup_id SET DEFAULT ('run-' || gen_random_uuid()::text),
    ADD COLUMN stream_seq       bigint,
    ADD COLUMN relay_checked_at timestamptz,
    ADD COLUMN relay_gen        int NOT NULL DEFAULT 0,
    ADD COLUMN lease_owner      text,
    ADD COLUMN lease_seq        bigint,
    ADD COLUMN leased_until     timestamptz;

-- Queued runs published before this migration are checked by the
-- reconciler from their publish time on (they have no sequence: it
-- republishes them once, a copy the worker acks without a call when the
-- first is still there).
UPDATE runs SET relay_checked_at = published_at WHERE status = 'queued' AND published_at IS NOT NULL;

-- The reconciler's pass: queued published runs, least recently checked
-- first (a run an older build published has no relay_checked_at: its
-- publish time stands for it).
CREATE INDEX runs_relay_check_idx ON runs ((coalesce(relay_checked_at, published_at)))
    WHERE status = 'queued' AND published_at IS NOT NULL;
