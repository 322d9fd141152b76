-- The results stream's outbox (docs/results-stream.md). Every change a
-- downstream system must know (a result, a held or failed run, a
-- rejection, a retraction, an erasure, a batch done) is one row, written
-- in the transaction of the change; the results relay (package relay)
-- publishes the rows in id order to the results stream and records each
-- row's stream sequence.
--
-- results_outbox_state holds one row: whether changes are written to the
-- outbox at all (results.enabled in the worker's configuration: a worker
-- started with it true turns the switch on, one started with it false on
-- a database whose switch is on refuses to start, and only `migrate
-- results-off` turns it off; every other command reads it here), and the
-- creation time of the results stream the rows were published to, so the
-- relay tells a stream made again (its server lost its store) from the
-- one it published to.
CREATE TABLE results_outbox_state (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    enabled        boolean NOT NULL DEFAULT false,
    stream_created timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO results_outbox_state DEFAULT VALUES;

--   event_id     random ('evt-' and a version 4 UUID), the consumers'
--                idempotency key and the Nats-Msg-Id of every publish of
--                the row: a database restored from a backup never hands
--                out one a consumer saw;
--   record       the validated record (result, held): customer values,
--                deleted with the row when the message is erased;
--   detail       what else the event says (the error list of a failed
--                run, the decision undone, a batch's summary); never
--                customer values.
CREATE TABLE results_outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id       text NOT NULL UNIQUE DEFAULT ('evt-' || gen_random_uuid()::text),
    type           text NOT NULL
                   CHECK (type IN ('result', 'held', 'failed', 'rejected', 'retracted', 'erased', 'batch.done')),
    message_id     bigint REFERENCES messages (id),
    run_no         int,
    batch_id       text NOT NULL,
    schema_id      text NOT NULL,
    schema_version text NOT NULL DEFAULT '',
    prompt_version text NOT NULL DEFAULT '',
    model          text NOT NULL DEFAULT '',
    outcome        text NOT NULL DEFAULT '',
    record         jsonb,
    detail         jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz,
    stream_seq     bigint,
    CHECK ((type = 'batch.done') = (message_id IS NULL))
);
-- The relay's pass: rows not published yet, in order.
CREATE INDEX results_outbox_unpublished_idx ON results_outbox (id) WHERE published_at IS NULL;
-- Erasure deletes a message's rows.
CREATE INDEX results_outbox_message_idx ON results_outbox (message_id) WHERE message_id IS NOT NULL;
-- A batch is done once: the transaction that writes its last outcome
-- writes the row, and only one can.
CREATE UNIQUE INDEX results_outbox_batch_done_key ON results_outbox (batch_id) WHERE type = 'batch.done';
