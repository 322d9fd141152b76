package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Erasure removes a customer's text from every table that holds it, on
// the customer's request (MessagesErase) or after a retention period
// (MessagesPurge). For each erased message:
//
//   - messages: body becomes "", metadata {}, content_hash empty;
//     erased_at and erased_by are set. The key, batch and flags stay.
//   - llm_calls: the model's reply, its stripped form and any repair
//     patch become empty (they copy the text). Tokens, cost, latency,
//     model and validity stay.
//   - extractions: the message's results are deleted (they copy the text
//     and quote it as evidence). The runs keep their status.
//   - triage_items: the last reply and the decision reason become empty,
//     and a held run's record and evidence (held_record, held_evidence)
//     NULL; an open item is closed as rejected, decided by the erasure's
//     actor.
//     The error list stays: it holds paths and kinds, never values.
//   - audit_log: reason, before and after of the message's and its
//     items' entries become empty (NULL for before and after); who, what
//     and when stay. One entry records the erasure of the message, and
//     one more each of its triage items, so an item's history shows it.
//   - qa_samples, qa_verdicts: a sample's stratum (a value of the
//     record) becomes "" and an open sample is closed (erased); a
//     verdict's fix becomes NULL. Whether each field was right stays.
//   - failure_events are kept whole: they carry no customer values.
//   - results_outbox: the message's rows are deleted (results and held
//     runs copy the record), and one erased event is written, whose
//     publish purges the message's earlier events from the results
//     stream (package relay).
//
// A message with a queued run is not erased (ErasureQueued): the worker
// would read its text, and its outcome would write the text back. Once
// erased, no run is made for the message (the runs_refuse_erased
// trigger) and an ingest of its key is refused (IngestErased).

// Erasure statuses of one message (ErasureResult.Status).
const (
	ErasureErased        = "erased"         // erased now
	ErasureAlreadyErased = "already_erased" // erased before; nothing changed
	ErasureNotFound      = "not_found"      // no message has this key
	ErasureQueued        = "queued"         // a run is queued; not erased (try again once it is done)
	ErasureWouldErase    = "would_erase"    // a dry run's: erased, were it not a dry run
)

// Audited erasure actions (audit_log.action).
const (
	AuditErase = "erase" // a customer's request (retention erase)
	AuditPurge = "purge" // the retention period (retention purge)
)

// MessageKey names a message by its key.
type MessageKey struct {
	Source     string `json:"source"`
	ExternalID string `json:"id"`
}

// ErasureParams says who erases and why, for the audit log.
type ErasureParams struct {
	Actor  string // required: the person (or job) on whose word the text is erased
	Via    string // required: ViaCLI, ViaAPI or ViaUI
	Reason string // such as the request's ticket number; must not hold customer text
	// DryRun (MessagesErase) does all the work and rolls it back: the
	// results say what an erasure would do, ErasureWouldErase for the
	// messages it would erase.
	DryRun bool
}

// ErasureResult is what MessagesErase did to one key.
type ErasureResult struct {
	MessageKey
	Status    string     `json:"status"`               // one of the Erasure statuses
	MessageID int64      `json:"message_id,omitempty"` // 0 when not found
	ErasedAt  *time.Time `json:"erased_at,omitempty"`  // when erased, now or before
	// QueuedRun is the queued run's number for ErasureQueued.
	QueuedRun int `json:"queued_run,omitempty"`
}

// MaxErasureKeys is the most keys MessagesErase takes in one call (one
// transaction).
const MaxErasureKeys = 1000

// erasureLockSQL locks the triage items, then the messages, of the keys
// ($1 sources, $2 ids, in pairs), so no run is made for them and no
// reviewer decides on them until the erasure commits. Items come first,
// as a reviewer's re-run takes them (item, then message).
var erasureLockSQL = [...]string{`
SELECT t.id FROM triage_items t
JOIN messages m ON m.id = t.message_id
JOIN unnest($1::text[], $2::text[]) AS k(source, external_id)
  ON m.source = k.source AND m.external_id = k.external_id
ORDER BY t.id
FOR UPDATE OF t`, `
SELECT m.id FROM messages m
JOIN unnest($1::text[], $2::text[]) AS k(source, external_id)
  ON m.source = k.source AND m.external_id = k.external_id
ORDER BY m.id
FOR UPDATE OF m`}

// erasureLookupSQL reads, after erasureLockSQL (so its snapshot holds
// every run made before the lock), each key's message, when it was
// erased, and its queued run if any; a key with no message comes back
// with a NULL id.
const erasureLookupSQL = `
SELECT k.source, k.external_id, m.id, m.erased_at,
       (SELECT min(r.run_no) FROM runs r WHERE r.message_id = m.id AND r.status = 'queued')
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(source, external_id, n)
LEFT JOIN messages m ON m.source = k.source AND m.external_id = k.external_id
ORDER BY k.n`

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// MessagesErase erases the text of the messages with the given keys in
// one transaction, as Erasure describes, and returns one result per
// distinct key, in the order first given. Messages with a queued run,
// erased already, or missing are left as they are and say so in their
// result. With p.DryRun it rolls everything back (in a savepoint when db
// is a transaction). It returns an error when p lacks its actor or via,
// when keys number more than MaxErasureKeys, or when Postgres fails; then
// nothing is erased.
func (s *Store) MessagesErase(ctx context.Context, db DBTX, keys []MessageKey, p ErasureParams) ([]ErasureResult, error) {
	if p.Actor == "" || p.Via == "" {
		return nil, fmt.Errorf("store.MessagesErase: actor and via are required")
	}
	if len(keys) > MaxErasureKeys {
		return nil, fmt.Errorf("store.MessagesErase: %d keys; at most %d in one call", len(keys), MaxErasureKeys)
	}
	var sources, ids []string
	seenKey := map[MessageKey]bool{}
	for _, k := range keys {
		k = MessageKey{Source: CleanText(k.Source), ExternalID: CleanText(k.ExternalID)}
		if !seenKey[k] {
			seenKey[k] = true
			sources, ids = append(sources, k.Source), append(ids, k.ExternalID)
		}
	}
	out := make([]ErasureResult, 0, len(ids))
	run := func(tx DBTX) error {
		out = out[:0]
		for _, lock := range erasureLockSQL {
			if _, err := tx.Exec(ctx, lock, sources, ids); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, erasureLookupSQL, sources, ids)
		if err != nil {
			return err
		}
		var erase []int64
		seen := map[int64]bool{}
		for rows.Next() {
			var r ErasureResult
			var id *int64
			var queued *int
			if err := rows.Scan(&r.Source, &r.ExternalID, &id, &r.ErasedAt, &queued); err != nil {
				rows.Close()
				return err
			}
			switch {
			case id == nil:
				r.Status = ErasureNotFound
			case r.ErasedAt != nil:
				r.Status, r.MessageID = ErasureAlreadyErased, *id
			case queued != nil:
				r.Status, r.MessageID, r.QueuedRun = ErasureQueued, *id, *queued
			default:
				r.Status, r.MessageID = ErasureErased, *id
				if !seen[*id] {
					seen[*id] = true
					erase = append(erase, *id)
				}
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(erase) == 0 {
			return nil
		}
		at, erased, err := eraseMessages(ctx, tx, erase, p, AuditErase, false)
		if err != nil {
			return err
		}
		if len(erased) != len(erase) {
			// Cannot happen while the lock holds; never report a message
			// erased that was not.
			return fmt.Errorf("erased %d of %d messages; nothing erased", len(erased), len(erase))
		}
		for i := range out {
			switch {
			case out[i].Status != ErasureErased:
			case p.DryRun:
				out[i].Status = ErasureWouldErase
			default:
				out[i].ErasedAt = &at
			}
		}
		if p.DryRun {
			return errDryRun
		}
		return nil
	}
	var err error
	if b, ok := db.(beginner); ok && p.DryRun {
		// A transaction of its own, or a savepoint in the caller's.
		err = pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error { return run(tx) })
	} else {
		err = inTx(ctx, db, run)
	}
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("store.MessagesErase(%d keys): %w", len(keys), interpretError(err))
	}
	return out, nil
}

// PurgeParams says which messages a purge erases.
type PurgeParams struct {
	ErasureParams
	// ReceivedBefore: messages received before it are erased. Required.
	ReceivedBefore time.Time
	// Chunk is the most messages erased in one transaction. Default 500.
	Chunk int
	// DryRun counts what would be erased and kept, and erases nothing.
	DryRun bool
	// Progress, if set, is called after each chunk's commit with the
	// messages erased so far.
	Progress func(erased int)
}

// PurgeResult counts what a purge did. Messages older than the cutoff
// that are still being worked on are kept, and erased by a later purge.
type PurgeResult struct {
	Erased       int `json:"erased"`         // erased now (would be, with DryRun)
	KeptQueued   int `json:"kept_queued"`    // kept: a run is queued
	KeptOpenItem int `json:"kept_open_item"` // kept: a triage item awaits a reviewer
	// KeptBusy: kept because another transaction held the message (a
	// purge running beside this one, an ingest of its key).
	KeptBusy int `json:"kept_busy"`
}

// purgeCandidatesSQL picks up to $2 unerased messages received before $1
// with no queued run and no open triage item, and locks them; rows
// another transaction holds are skipped. eraseSQL checks the runs and
// items again after the lock.
const purgeCandidatesSQL = `
SELECT m.id FROM messages m
WHERE m.erased_at IS NULL AND m.received_at < $1
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.message_id = m.id AND r.status = 'queued')
  AND NOT EXISTS (SELECT 1 FROM triage_items t WHERE t.message_id = m.id AND t.status = 'open')
ORDER BY m.received_at, m.id
LIMIT $2
FOR UPDATE OF m SKIP LOCKED`

// purgeCountSQL counts the unerased messages received before $1: those a
// purge erases, those kept for a queued run, and those kept for an open
// triage item (and no queued run).
const purgeCountSQL = `
SELECT count(*) FILTER (WHERE NOT q AND NOT o),
       count(*) FILTER (WHERE q),
       count(*) FILTER (WHERE o AND NOT q)
FROM (
    SELECT EXISTS (SELECT 1 FROM runs r WHERE r.message_id = m.id AND r.status = 'queued') AS q,
           EXISTS (SELECT 1 FROM triage_items t WHERE t.message_id = m.id AND t.status = 'open') AS o
    FROM messages m
    WHERE m.erased_at IS NULL AND m.received_at < $1
) c`

// MessagesPurge erases, as Erasure describes, every message received
// before p.ReceivedBefore that has no queued run and no open triage item,
// p.Chunk messages per transaction, and counts those it kept. With
// p.DryRun it only counts. It returns an error when p lacks its actor,
// via or cutoff, or when Postgres fails; chunks committed before the
// failure stay erased, and Erased counts them.
func (s *Store) MessagesPurge(ctx context.Context, p PurgeParams) (PurgeResult, error) {
	var res PurgeResult
	if p.Actor == "" || p.Via == "" || p.ReceivedBefore.IsZero() {
		return res, fmt.Errorf("store.MessagesPurge: actor, via and a cutoff are required")
	}
	fail := func(err error) (PurgeResult, error) {
		return res, fmt.Errorf("store.MessagesPurge(before %s): %w", p.ReceivedBefore.UTC().Format(time.RFC3339), interpretError(err))
	}
	if p.DryRun {
		if err := s.Pool.QueryRow(ctx, purgeCountSQL, p.ReceivedBefore).Scan(&res.Erased, &res.KeptQueued, &res.KeptOpenItem); err != nil {
			return fail(err)
		}
		return res, nil
	}
	chunk := p.Chunk
	if chunk <= 0 {
		chunk = 500
	}
	for {
		n := 0
		err := s.InTx(ctx, func(tx DBTX) error {
			rows, err := tx.Query(ctx, purgeCandidatesSQL, p.ReceivedBefore, chunk)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil || len(ids) == 0 {
				return err
			}
			n = len(ids)
			_, erased, err := eraseMessages(ctx, tx, ids, p.ErasureParams, AuditPurge, true)
			res.Erased += len(erased)
			return err
		})
		if err != nil {
			return fail(err)
		}
		if n == 0 {
			break
		}
		if p.Progress != nil {
			p.Progress(res.Erased)
		}
	}
	if err := s.Pool.QueryRow(ctx, purgeCountSQL, p.ReceivedBefore).Scan(&res.KeptBusy, &res.KeptQueued, &res.KeptOpenItem); err != nil {
		return fail(err)
	}
	return res, nil
}

// eraseMessagesSQL erases the text of the messages $1 (locked by the
// caller), except those with a queued run and, when $3, those with an
// open triage item; its snapshot, taken after the lock, sees every run and
// item made before it. $2 is the actor. It returns the erasure's time and
// the messages erased.
const eraseMessagesSQL = `
WITH msg AS (
    UPDATE messages m SET body = '', metadata = '{}', content_hash = '\x'::bytea,
                          erased_at = now(), erased_by = $2
    WHERE m.id = ANY($1) AND m.erased_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.message_id = m.id AND r.status = 'queued')
      AND NOT ($3 AND EXISTS (SELECT 1 FROM triage_items t WHERE t.message_id = m.id AND t.status = 'open'))
    RETURNING m.id
)
SELECT now(), coalesce(array_agg(id ORDER BY id), '{}') FROM msg`

// eraseCopiesSQL erases the copies of the text of the messages $1 (just
// erased by eraseMessagesSQL), as Erasure describes, and records the
// erasure in the audit log: $2 is the actor, $3 the via, $4 the audit
// action, $5 the reason. The audit log's rows may be changed only while
// extractq.erasing is on (migration 000008). Each table is reached by an
// index on the message id (the audit log's also by its item id).
const eraseCopiesSQL = `
WITH calls AS (
    UPDATE llm_calls SET reply = '', stripped = '', patch = NULL
    WHERE message_id = ANY($1) AND (reply <> '' OR stripped <> '' OR patch IS NOT NULL)
), results AS (
    DELETE FROM extractions WHERE message_id = ANY($1)
), items AS (
    UPDATE triage_items SET last_reply = '', decision_reason = '', held_record = NULL, held_evidence = NULL,
           status = CASE WHEN status = 'open' THEN 'rejected' ELSE status END,
           decided_by = CASE WHEN status = 'open' THEN $2 ELSE decided_by END,
           decided_at = CASE WHEN status = 'open' THEN now() ELSE decided_at END,
           claimed_by = NULL, claim_expires = NULL, updated_at = now()
    WHERE message_id = ANY($1)
), audit AS (
    UPDATE audit_log SET reason = '', before = NULL, after = NULL
    WHERE (message_id = ANY($1)
           OR triage_item_id = ANY(ARRAY(SELECT t.id FROM triage_items t WHERE t.message_id = ANY($1))))
      AND (reason <> '' OR before IS NOT NULL OR after IS NOT NULL)
)
INSERT INTO audit_log (actor, via, action, triage_item_id, message_id, run_no, reason)
SELECT $2, $3, $4, NULL, id, NULL, $5 FROM unnest($1::bigint[]) AS id
UNION ALL
SELECT $2, $3, $4, t.id, t.message_id, t.run_no, $5 FROM triage_items t WHERE t.message_id = ANY($1)`

// eraseMessages erases the messages ids (locked by the caller) and their
// copies on tx, with the audit log's erasure switch on for the two
// statements. It returns the erasure's time and the messages erased.
func eraseMessages(ctx context.Context, tx DBTX, ids []int64, p ErasureParams, action string, keepOpenItems bool) (time.Time, []int64, error) {
	var at time.Time
	var erased []int64
	actor := CleanText(p.Actor)
	if err := tx.QueryRow(ctx, eraseMessagesSQL, ids, actor, keepOpenItems).Scan(&at, &erased); err != nil || len(erased) == 0 {
		return at, erased, err
	}
	if _, err := tx.Exec(ctx, `SET LOCAL extractq.erasing = 'on'`); err != nil {
		return time.Time{}, nil, err
	}
	if _, err := tx.Exec(ctx, eraseCopiesSQL, erased, actor, p.Via, action, CleanText(p.Reason)); err != nil {
		return time.Time{}, nil, err
	}
	if _, err := tx.Exec(ctx, eraseQASQL, erased); err != nil {
		return time.Time{}, nil, err
	}
	if _, err := tx.Exec(ctx, `SET LOCAL extractq.erasing = 'off'`); err != nil {
		return time.Time{}, nil, err
	}
	if _, err := tx.Exec(ctx, outboxEraseSQL, erased); err != nil {
		return time.Time{}, nil, err
	}
	return at, erased, nil
}

// MessageSources returns up to 5 sources under which a message with
// external id id is stored: what a key given with the wrong source may
// have meant.
func (s *Store) MessageSources(ctx context.Context, db DBTX, id string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT source FROM messages WHERE external_id = $1 ORDER BY source LIMIT 5`, CleanText(id))
	if err != nil {
		return nil, fmt.Errorf("store.MessageSources(%q): %w", id, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store.MessageSources(%q): %w", id, err)
	}
	return out, nil
}
