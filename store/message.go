package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is a customer message, stored once. Its key is (Source,
// ExternalID).
type Message struct {
	ID          int64           // the store's id, used by runs and every outcome row
	Source      string          // where the id is unique; may be empty
	ExternalID  string          // the message's own id
	Body        string          // the text, as stored (see CleanText)
	ContentHash []byte          // the caller's hash of the body, compared on re-ingest
	Metadata    json.RawMessage // a JSON object; {} when none
	Flags       []string        // ingest's notes on the input, never nil after a read
	BatchID     string          // the batch that first ingested it
	ReceivedAt  time.Time
	// ErasedAt is when the message's text was erased (MessagesErase), nil
	// while it is kept. An erased message has an empty Body and Metadata
	// {}, and no content hash.
	ErasedAt *time.Time
	ErasedBy string // who asked for the erasure; "" while it is kept
}

// messageColumns are the columns of Message, in field order, for the
// table aliased m.
const messageColumns = `m.id, m.source, m.external_id, m.body, m.content_hash,
       m.metadata, m.flags, m.batch_id, m.received_at, m.erased_at,
       coalesce(m.erased_by, '')`

func (m *Message) scanTargets() []any {
	return []any{&m.ID, &m.Source, &m.ExternalID, &m.Body, &m.ContentHash,
		&m.Metadata, &m.Flags, &m.BatchID, &m.ReceivedAt, &m.ErasedAt, &m.ErasedBy}
}

// IngestStatus is what MessageIngest did.
type IngestStatus string

// The ingest statuses.
const (
	// IngestInserted: the message and its run 1 were recorded.
	IngestInserted IngestStatus = "inserted"
	// IngestDuplicate: the message was already stored with the same
	// content hash; nothing was written.
	IngestDuplicate IngestStatus = "duplicate"
	// IngestConflict: the message was already stored with a different
	// content hash; nothing was written and the stored message is kept.
	IngestConflict IngestStatus = "conflict"
	// IngestNewRun: the message was already stored with the same content
	// hash but never extracted with this schema; a new run (the next run
	// number, this batch and schema) was recorded.
	IngestNewRun IngestStatus = "new_run"
	// IngestErased: the message was stored and later erased; nothing was
	// written, so an erased text is never stored again under its key.
	IngestErased IngestStatus = "erased"
)

// MessageIngestParams is a message to record, with the batch and schema
// of its first run.
type MessageIngestParams struct {
	Source      string          // may be empty; NUL or invalid UTF-8 is refused (CheckKeyText)
	ExternalID  string          // required; NUL or invalid UTF-8 is refused (CheckKeyText)
	Body        string          // NUL and invalid UTF-8 become U+FFFD (see CleanText)
	ContentHash []byte          // required; compared on re-ingest
	Metadata    json.RawMessage // a JSON object; nil means {}
	Flags       []string        // nil means none
	BatchID     string          // required; the batch must exist (BatchInsert)
	SchemaID    string          // required; the schema of run 1
}

// MessageIngestResult is the outcome of MessageIngest.
type MessageIngestResult struct {
	Status IngestStatus
	// Message is the stored message: the new one, or the one found.
	Message Message
	// Run is run 1 when inserted, the new run for IngestNewRun, else the
	// message's latest run with this schema (its latest run of any schema
	// for a conflict), so the caller can publish again a run whose
	// PublishedAt is nil.
	Run Run
}

// messageIngestSQL inserts the message and its run 1 in one statement,
// so both or neither are written; a message that exists is left alone
// and no row comes back. The run's dedup id is the column's random default.
const messageIngestSQL = `
WITH m AS (
    INSERT INTO messages (source, external_id, body, content_hash, metadata, flags, batch_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (source, external_id) DO NOTHING
    RETURNING *
), r AS (
    INSERT INTO runs (message_id, run_no, batch_id, schema_id)
    SELECT m.id, 1, $7, $8
    FROM m
    RETURNING *
)
SELECT ` + runColumns + `,
       ` + messageColumns + `
FROM r JOIN m ON m.id = r.message_id`

// messageGetLatestRunSQL reads a message by key with its latest run, the
// latest of schema $3 first: a message without a run of that schema comes
// back with its latest run of another.
const messageGetLatestRunSQL = `
SELECT ` + runColumns + `,
       ` + messageColumns + `
FROM messages m
JOIN LATERAL (
    SELECT * FROM runs WHERE runs.message_id = m.id
    ORDER BY runs.schema_id = $3 DESC, run_no DESC LIMIT 1
) r ON true
WHERE m.source = $1 AND m.external_id = $2`

// messageNewRunSQL records the next run of message $1 for batch $2 and
// schema $3, unless the message has a run of that schema. The caller
// holds the message row's lock, as a re-run does, so run numbers are
// taken one at a time.
const messageNewRunSQL = `
INSERT INTO runs (message_id, run_no, batch_id, schema_id)
SELECT $1, n.run_no, $2, $3
FROM (SELECT max(run_no) + 1 AS run_no FROM runs WHERE message_id = $1) n
WHERE NOT EXISTS (SELECT 1 FROM runs WHERE message_id = $1 AND schema_id = $3)
RETURNING ` + runColumnsBare

// MessageIngest records a message and its run 1 (status queued, a new
// random dedup id) atomically if (Source, ExternalID) is new, returning
// IngestInserted. If the message exists with the same content hash it
// writes nothing and returns IngestDuplicate with the stored message and
// its latest run of SchemaID; if it has no run of SchemaID yet, it records
// one (the next run number, in BatchID) and returns IngestNewRun, so the
// stored messages can be extracted with a second schema by ingesting them
// again. If it exists with a different hash it writes nothing and
// returns IngestConflict with the stored message and an error wrapping
// ErrConflict; if its text was erased, IngestErased and an error wrapping
// ErrErased. A key part with a NUL or invalid UTF-8, or a value Postgres
// refuses (SQLSTATE class 22 or 54: a number jsonb cannot hold, an id
// too long to index), is an error wrapping a *ValueError: the input's
// own fault, the same on every try. Concurrent ingests of one key give
// one IngestInserted, and one IngestNewRun per schema.
func (s *Store) MessageIngest(ctx context.Context, db DBTX, p MessageIngestParams) (MessageIngestResult, error) {
	if p.ExternalID == "" || len(p.ContentHash) == 0 || p.BatchID == "" || p.SchemaID == "" {
		return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): external id, content hash, batch id and schema id are required",
			p.Source, p.ExternalID)
	}
	metadata := CleanJSON(p.Metadata)
	if len(metadata) == 0 {
		metadata = json.RawMessage(`{}`)
	}
	flags := make([]string, len(p.Flags))
	for i, f := range p.Flags {
		flags[i] = CleanText(f)
	}
	// A key is kept byte for byte: one Postgres could store only changed
	// is refused, never rewritten into another message's key.
	for _, k := range [][2]string{{"id", p.ExternalID}, {"source", p.Source}} {
		if err := CheckKeyText(k[0], k[1]); err != nil {
			return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): %w", p.Source, p.ExternalID, err)
		}
	}
	source, externalID := p.Source, p.ExternalID

	rows, err := db.Query(ctx, messageIngestSQL,
		source, externalID, CleanText(p.Body), p.ContentHash, metadata, flags, p.BatchID, p.SchemaID)
	if err != nil {
		return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): %w", p.Source, p.ExternalID, interpretError(err))
	}
	rm, err := pgx.CollectExactlyOneRow(rows, scanRunWithMessage)
	if err == nil {
		return MessageIngestResult{Status: IngestInserted, Message: rm.Message, Run: rm.Run}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): %w", p.Source, p.ExternalID, interpretError(err))
	}

	// The key exists. Under READ COMMITTED this statement sees a
	// concurrent ingest's committed row (ON CONFLICT waited for it).
	rows, err = db.Query(ctx, messageGetLatestRunSQL, source, externalID, p.SchemaID)
	if err != nil {
		return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): read existing: %w", p.Source, p.ExternalID, err)
	}
	rm, err = pgx.CollectExactlyOneRow(rows, scanRunWithMessage)
	if err != nil {
		return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): read existing: %w", p.Source, p.ExternalID, interpretError(err))
	}
	res := MessageIngestResult{Status: IngestDuplicate, Message: rm.Message, Run: rm.Run}
	if e := rm.Message.ErasedAt; e != nil {
		res.Status = IngestErased
		return res, fmt.Errorf("store.MessageIngest(%q, %q): erased at %s: %w",
			p.Source, p.ExternalID, e.UTC().Format(time.RFC3339), ErrErased)
	}
	if !bytes.Equal(rm.Message.ContentHash, p.ContentHash) {
		res.Status = IngestConflict
		return res, fmt.Errorf("store.MessageIngest(%q, %q): stored with a different content hash: %w",
			p.Source, p.ExternalID, ErrConflict)
	}
	if rm.Run.SchemaID == p.SchemaID {
		return res, nil
	}
	run, created, err := s.messageNewRun(ctx, db, rm.Message.ID, p.BatchID, p.SchemaID)
	if err != nil {
		return MessageIngestResult{}, fmt.Errorf("store.MessageIngest(%q, %q): new run with schema %q: %w",
			p.Source, p.ExternalID, p.SchemaID, interpretError(err))
	}
	res.Run = run
	if created {
		res.Status = IngestNewRun
	}
	return res, nil
}

// messageNewRun records the message's next run for batch and schema under
// the message row's lock, or, when a concurrent ingest recorded one first,
// returns that run with created false.
func (s *Store) messageNewRun(ctx context.Context, db DBTX, messageID int64, batch, schema string) (run Run, created bool, err error) {
	err = inTx(ctx, db, func(tx DBTX) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM messages WHERE id = $1 FOR UPDATE`, messageID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, messageNewRunSQL, messageID, batch, schema)
		if err != nil {
			return err
		}
		run, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Run])
		if err == nil {
			created = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+runColumnsBare+` FROM runs WHERE message_id = $1 AND schema_id = $2 ORDER BY run_no DESC LIMIT 1`,
			messageID, schema)
		if err != nil {
			return err
		}
		run, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Run])
		return err
	})
	return run, created, err
}
