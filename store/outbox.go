package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The results outbox (migration 000024, docs/results-stream.md): one row
// per change a downstream system must know, written in the transaction of
// the change, published in id order by the results relay (package relay)
// to the results stream. Rows are written only while the outbox is
// enabled (ResultsOutboxEnable; results_outbox_state), which every writer
// reads in the same statement, so every command agrees without its own
// configuration.
//
// Writers: a run's outcome (outcomeWriteSQL: result, held, failed), the
// transaction that writes a batch's last outcome (batch.done,
// outboxBatchDone), a reviewer's approval (result), rejection (rejected)
// and undoing of either (retracted), and an erasure (erased; the
// message's earlier rows are deleted in the same transaction).

// Outbox event types (results_outbox.type).
const (
	EventResult    = "result"
	EventHeld      = "held"
	EventFailed    = "failed"
	EventRejected  = "rejected"
	EventRetracted = "retracted"
	EventErased    = "erased"
	EventBatchDone = "batch.done"
)

// outboxEnabledSQL is the condition every outbox write carries.
const outboxEnabledSQL = `(SELECT enabled FROM results_outbox_state)`

// OutboxEvent is one row of the outbox, with the key of its message.
type OutboxEvent struct {
	ID      int64  `db:"id"`
	EventID string `db:"event_id"` // random, the consumers' idempotency key
	Type    string `db:"type"`     // one of the Event types
	// MessageID and RunNo are 0 for batch.done; RunNo is the run the
	// event is about (for erased, the message's latest run).
	MessageID     int64  `db:"message_id"`
	RunNo         int    `db:"run_no"`
	BatchID       string `db:"batch_id"`
	SchemaID      string `db:"schema_id"`
	SchemaVersion string `db:"schema_version"`
	PromptVersion string `db:"prompt_version"`
	Model         string `db:"model"`
	// Outcome is succeeded, repaired or approved for a result; for held,
	// how the held record validated.
	Outcome string `db:"outcome"`
	// Record is the validated record of a result or a held run; nil
	// otherwise.
	Record json.RawMessage `db:"record"`
	// Detail is the rest of the event as a JSON object (the error list of
	// a failed run, the decision undone, a batch's summary).
	Detail    json.RawMessage `db:"detail"`
	CreatedAt time.Time       `db:"created_at"`
	// Source and ExternalID are the message's key; empty for batch.done.
	Source     string `db:"source"`
	ExternalID string `db:"external_id"`
	// Text is the message's text, read only when asked for
	// (ResultsOutboxListParams.WithText); "" once erased.
	Text string `db:"text"`
}

// ResultsOutboxState is the outbox's one row of state.
type ResultsOutboxState struct {
	Enabled bool
	// StreamCreated is the creation time of the results stream the rows
	// were last published to (nil before the first publish).
	StreamCreated *time.Time
}

// ResultsOutboxEnable turns the outbox's writes on or off for every
// command of the deployment. Turning it on does not write the changes
// made before.
func (s *Store) ResultsOutboxEnable(ctx context.Context, db DBTX, on bool) error {
	_, err := db.Exec(ctx, `
INSERT INTO results_outbox_state (one, enabled) VALUES (true, $1)
ON CONFLICT (one) DO UPDATE SET enabled = $1, updated_at = now() WHERE results_outbox_state.enabled <> $1`, on)
	if err != nil {
		return fmt.Errorf("store.ResultsOutboxEnable(%t): %w", on, err)
	}
	return nil
}

// ResultsOutboxStateGet returns the outbox's state.
func (s *Store) ResultsOutboxStateGet(ctx context.Context, db DBTX) (ResultsOutboxState, error) {
	var st ResultsOutboxState
	if err := db.QueryRow(ctx, `SELECT enabled, stream_created FROM results_outbox_state`).Scan(&st.Enabled, &st.StreamCreated); err != nil {
		return st, fmt.Errorf("store.ResultsOutboxStateGet: %w", err)
	}
	return st, nil
}

// ErrOutboxBusy means another relay holds the outbox (ResultsOutboxLock).
var ErrOutboxBusy = errors.New("another relay is publishing the results outbox")

// ResultsOutboxLock takes, for the rest of transaction tx, the right to
// publish the outbox: one relay at a time, so rows go out in order. It
// returns the state, or ErrOutboxBusy when another transaction holds it.
func (s *Store) ResultsOutboxLock(ctx context.Context, tx DBTX) (ResultsOutboxState, error) {
	var st ResultsOutboxState
	const lockSQL = `SELECT enabled, stream_created FROM results_outbox_state FOR UPDATE SKIP LOCKED`
	err := tx.QueryRow(ctx, lockSQL).Scan(&st.Enabled, &st.StreamCreated)
	if errors.Is(err, pgx.ErrNoRows) {
		// Locked by another, or no row at all (deleted by hand): then
		// make it again, as the migration did.
		tag, ierr := tx.Exec(ctx, `INSERT INTO results_outbox_state DEFAULT VALUES ON CONFLICT DO NOTHING`)
		if ierr != nil {
			return st, fmt.Errorf("store.ResultsOutboxLock: %w", ierr)
		}
		if tag.RowsAffected() == 0 {
			return st, ErrOutboxBusy
		}
		err = tx.QueryRow(ctx, lockSQL).Scan(&st.Enabled, &st.StreamCreated)
	}
	if err != nil {
		return st, fmt.Errorf("store.ResultsOutboxLock: %w", err)
	}
	return st, nil
}

// ResultsOutboxListParams selects rows to publish.
type ResultsOutboxListParams struct {
	// Limit is the most rows returned. Default 500.
	Limit int
	// WithText reads each message's text into OutboxEvent.Text.
	WithText bool
}

const outboxListSQL = `
SELECT o.id, o.event_id, o.type, coalesce(o.message_id, 0) AS message_id, coalesce(o.run_no, 0) AS run_no,
       o.batch_id, o.schema_id, o.schema_version, o.prompt_version, o.model, o.outcome, o.record, o.detail,
       o.created_at, coalesce(m.source, '') AS source, coalesce(m.external_id, '') AS external_id,
       CASE WHEN $2 THEN coalesce(m.body, '') ELSE '' END AS text
FROM results_outbox o LEFT JOIN messages m ON m.id = o.message_id
WHERE o.published_at IS NULL
ORDER BY o.id
LIMIT $1`

// ResultsOutboxListUnpublished returns the rows not published yet, in id
// (publish) order.
func (s *Store) ResultsOutboxListUnpublished(ctx context.Context, db DBTX, p ResultsOutboxListParams) ([]OutboxEvent, error) {
	rows, err := db.Query(ctx, outboxListSQL, limitOr(p.Limit, 500), p.WithText)
	if err != nil {
		return nil, fmt.Errorf("store.ResultsOutboxListUnpublished: %w", err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[OutboxEvent])
	if err != nil {
		return nil, fmt.Errorf("store.ResultsOutboxListUnpublished: %w", err)
	}
	return evs, nil
}

// OutboxPublished names a row and the stream sequence of its event.
type OutboxPublished struct {
	ID        int64
	StreamSeq uint64
}

// ResultsOutboxMarkPublished records that each row's event is on the
// stream at its sequence, and, when streamCreated is not zero, the
// creation time of that stream.
func (s *Store) ResultsOutboxMarkPublished(ctx context.Context, db DBTX, rows []OutboxPublished, streamCreated time.Time) error {
	ids, seqs := make([]int64, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		ids[i], seqs[i] = r.ID, int64(r.StreamSeq)
	}
	if len(rows) > 0 {
		_, err := db.Exec(ctx, `
UPDATE results_outbox o SET published_at = now(), stream_seq = u.seq
FROM unnest($1::bigint[], $2::bigint[]) AS u(id, seq)
WHERE o.id = u.id`, ids, seqs)
		if err != nil {
			return fmt.Errorf("store.ResultsOutboxMarkPublished(%d rows): %w", len(rows), err)
		}
	}
	if !streamCreated.IsZero() {
		if _, err := db.Exec(ctx, `UPDATE results_outbox_state SET stream_created = $1, updated_at = now()
WHERE stream_created IS DISTINCT FROM $1`, streamCreated); err != nil {
			return fmt.Errorf("store.ResultsOutboxMarkPublished: %w", err)
		}
	}
	return nil
}

// ResultsOutboxRepublish marks every row unpublished, for a results
// stream that lost what it held (made again, created at streamCreated):
// the relay publishes them all again, in order, under their event ids.
// It returns how many rows it marked.
func (s *Store) ResultsOutboxRepublish(ctx context.Context, db DBTX, streamCreated time.Time) (int, error) {
	var n int
	err := inTx(ctx, db, func(tx DBTX) error {
		tag, err := tx.Exec(ctx, `UPDATE results_outbox SET published_at = NULL, stream_seq = NULL WHERE published_at IS NOT NULL`)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		_, err = tx.Exec(ctx, `UPDATE results_outbox_state SET stream_created = $1, updated_at = now()`, streamCreated)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store.ResultsOutboxRepublish: %w", err)
	}
	return n, nil
}

// ResultsOutboxMaxSeq returns the highest stream sequence recorded on a
// row; 0 when none is.
func (s *Store) ResultsOutboxMaxSeq(ctx context.Context, db DBTX) (uint64, error) {
	var seq int64
	if err := db.QueryRow(ctx, `SELECT coalesce(max(stream_seq), 0) FROM results_outbox`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store.ResultsOutboxMaxSeq: %w", err)
	}
	return uint64(seq), nil
}

// ResultsOutboxPrune deletes rows published before before (the stream
// keeps events for its max age; rows older than that would be published
// again only to age out) and returns how many it deleted.
func (s *Store) ResultsOutboxPrune(ctx context.Context, db DBTX, before time.Time) (int, error) {
	tag, err := db.Exec(ctx, `DELETE FROM results_outbox WHERE published_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("store.ResultsOutboxPrune: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// outboxDecisionSQL writes the event of a decision on run ($1, $2): type
// $3, schema version $4 (default the run's last call's), outcome $5,
// record $6, detail $7. The prompt version and model are those of the
// run's last call that decided it.
const outboxDecisionSQL = `
INSERT INTO results_outbox (type, message_id, run_no, batch_id, schema_id, schema_version, prompt_version, model,
    outcome, record, detail)
SELECT $3, r.message_id, r.run_no, r.batch_id, r.schema_id, coalesce(nullif($4, ''), c.schema_version, ''),
       coalesce(c.prompt_version, ''), coalesce(c.model, ''), $5, $6::jsonb, $7::jsonb
FROM runs r
LEFT JOIN LATERAL (
    SELECT c.schema_version, c.prompt_version, c.model FROM llm_calls c
    WHERE c.message_id = r.message_id AND c.run_no = r.run_no AND NOT c.superseded
    ORDER BY c.attempt DESC LIMIT 1) c ON true
WHERE r.message_id = $1 AND r.run_no = $2 AND ` + outboxEnabledSQL

// outboxDecision writes the event of a decision on a run in tx.
func outboxDecision(ctx context.Context, tx DBTX, messageID int64, runNo int, typ, schemaVersion, outcome string, record json.RawMessage, detail map[string]any) error {
	d, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("outbox event: %w", err)
	}
	var rec any
	if len(record) > 0 {
		rec = string(record)
	}
	if _, err := tx.Exec(ctx, outboxDecisionSQL, messageID, runNo, typ, schemaVersion, outcome, rec, string(d)); err != nil {
		return fmt.Errorf("outbox event: %w", err)
	}
	return nil
}

// outboxEraseSQL deletes the outbox rows of the messages $1 (just erased:
// unpublished rows are never published, published ones are purged from
// the stream by the erased event) and writes one erased event each.
const outboxEraseSQL = `
WITH gone AS (
    DELETE FROM results_outbox WHERE message_id = ANY($1)
)
INSERT INTO results_outbox (type, message_id, run_no, batch_id, schema_id)
SELECT 'erased', m.id, r.run_no, r.batch_id, r.schema_id
FROM messages m
JOIN LATERAL (SELECT run_no, batch_id, schema_id FROM runs WHERE message_id = m.id ORDER BY run_no DESC LIMIT 1) r ON true
WHERE m.id = ANY($1) AND ` + outboxEnabledSQL

// outboxBatchLockSQL locks the batches of the runs ($1, $2) (that this
// transaction just finished), in id order, while the outbox is enabled:
// the transactions finishing a batch's runs wait for each other here, so
// the one that commits last sees every other's outcome (next statement).
// FOR NO KEY UPDATE does not conflict with the key-share locks that
// inserting a run or message of the batch takes (its foreign key), so an
// ingest still writing the batch does not hold its outcomes back.
const outboxBatchLockSQL = `
SELECT b.id FROM batches b
WHERE b.id IN (` + outboxRunBatchesSQL + `)
  AND ` + outboxEnabledSQL + `
ORDER BY b.id
FOR NO KEY UPDATE OF b`

// outboxRunBatchesSQL lists the batches of the runs ($1, $2), each run
// read by its primary key.
const outboxRunBatchesSQL = `
SELECT (SELECT r.batch_id FROM runs r WHERE r.message_id = u.message_id AND r.run_no = u.run_no)
FROM unnest($1::bigint[], $2::int[]) AS u(message_id, run_no)`

// outboxBatchDoneSQL lists, after outboxBatchLockSQL (a new snapshot in
// READ COMMITTED, taken once the locks are held), the batches of runs
// ($1, $2) with no queued run and no batch.done yet.
const outboxBatchDoneSQL = `
SELECT b.id FROM batches b
WHERE b.id IN (` + outboxRunBatchesSQL + `)
  AND ` + outboxEnabledSQL + `
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = b.id AND r.status = 'queued')
  AND NOT EXISTS (SELECT 1 FROM results_outbox o WHERE o.batch_id = b.id AND o.type = 'batch.done')
ORDER BY b.id`

const outboxBatchDoneInsertSQL = `
INSERT INTO results_outbox (type, batch_id, schema_id, detail)
SELECT 'batch.done', b.id, b.schema_id, $2::jsonb FROM batches b WHERE b.id = $1
ON CONFLICT (batch_id) WHERE type = 'batch.done' DO NOTHING`

// runRefArrays returns the message ids and run numbers of refs.
func runRefArrays(refs []RunSeqRef) ([]int64, []int32) {
	ids, nos := make([]int64, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		ids[i], nos[i] = r.MessageID, int32(r.RunNo)
	}
	return ids, nos
}

// outboxBatchDone writes, in tx, a batch.done event with its summary for
// each batch whose last outcome is among those tx just wrote (done, the
// batches outboxBatchDoneSQL returned).
func (s *Store) outboxBatchDone(ctx context.Context, tx DBTX, done []string) error {
	for _, id := range done {
		sum, err := s.BatchSummary(ctx, tx, id)
		if err != nil {
			return err
		}
		d, err := json.Marshal(map[string]any{"summary": sum})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, outboxBatchDoneInsertSQL, id, string(d)); err != nil {
			return fmt.Errorf("batch.done of %q: %w", id, err)
		}
	}
	return nil
}

// outboxBatchCheck locks the batches of refs and writes their batch.done
// events, for a caller that did not queue the two statements itself.
func (s *Store) outboxBatchCheck(ctx context.Context, tx DBTX, refs []RunSeqRef) error {
	if len(refs) == 0 {
		return nil
	}
	ids, nos := runRefArrays(refs)
	if _, err := tx.Exec(ctx, outboxBatchLockSQL, ids, nos); err != nil {
		return fmt.Errorf("lock batches: %w", err)
	}
	rows, err := tx.Query(ctx, outboxBatchDoneSQL, ids, nos)
	if err != nil {
		return fmt.Errorf("batches done: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("batches done: %w", err)
	}
	return s.outboxBatchDone(ctx, tx, done)
}
