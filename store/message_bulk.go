package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// BulkMessage is one message of a MessageBulkLoad: its key within the
// load's source, its text and the text's content hash (ingest.ContentHash).
type BulkMessage struct {
	ExternalID  string
	Body        string
	ContentHash []byte
}

// MessageBulkLoadParams is one statement's worth of a bulk load: messages
// of one source, each recorded with its run 1 of SchemaID in BatchID (a
// batch BatchInsert recorded).
type MessageBulkLoadParams struct {
	Source   string
	BatchID  string
	SchemaID string
	Messages []BulkMessage
}

// messageBulkLoadSQL records each message of arrays $3-$5 and its run 1,
// as messageIngestSQL does for one; keys already stored are skipped.
const messageBulkLoadSQL = `
WITH m AS (
    INSERT INTO messages (source, external_id, body, content_hash, batch_id)
    SELECT $1, u.external_id, u.body, u.content_hash, $2
    FROM unnest($3::text[], $4::text[], $5::bytea[]) AS u(external_id, body, content_hash)
    ON CONFLICT (source, external_id) DO NOTHING
    RETURNING id
)
INSERT INTO runs (message_id, run_no, batch_id, schema_id)
SELECT m.id, 1, $2, $6
FROM m
RETURNING ` + runColumnsBare

// MessageBulkLoad records p's messages and their runs (status queued, not
// yet published) in one statement and returns the runs recorded, in no
// particular order; a key already stored is skipped, whatever its text.
//
// It is the bulk path for a backlog made by development tools (the
// bench loads every scenario's with it; scenario D waits with 1,000,000
// messages, which ingest's line-by-line checks and round trips would take
// many minutes to load): it does not check keys, clean
// text or compare content hashes as MessageIngest does, so its input must
// be clean already. Publish the runs it returns through the relay
// (relay.Relay.PublishMany), as every run is. A few thousand messages a
// call keep one statement's memory small; it errors when a message has
// no key or hash, or on any database error.
func (s *Store) MessageBulkLoad(ctx context.Context, db DBTX, p MessageBulkLoadParams) ([]Run, error) {
	if p.BatchID == "" || p.SchemaID == "" {
		return nil, fmt.Errorf("store.MessageBulkLoad: batch id and schema id are required")
	}
	ids := make([]string, len(p.Messages))
	bodies := make([]string, len(p.Messages))
	hashes := make([][]byte, len(p.Messages))
	for i, m := range p.Messages {
		if m.ExternalID == "" || len(m.ContentHash) == 0 {
			return nil, fmt.Errorf("store.MessageBulkLoad: message %d of %d: external id and content hash are required", i, len(p.Messages))
		}
		ids[i], bodies[i], hashes[i] = m.ExternalID, m.Body, m.ContentHash
	}
	rows, err := db.Query(ctx, messageBulkLoadSQL, p.Source, p.BatchID, ids, bodies, hashes, p.SchemaID)
	if err != nil {
		return nil, fmt.Errorf("store.MessageBulkLoad(%d messages): %w", len(p.Messages), interpretError(err))
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var r Run
		err := row.Scan(r.scanTargets()...)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("store.MessageBulkLoad(%d messages): %w", len(p.Messages), interpretError(err))
	}
	return runs, nil
}
