package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/extracttype"
)

// Triage item statuses.
const (
	TriageOpen     = "open"
	TriageApproved = "approved"
	TriageRejected = "rejected"
	TriageRerun    = "rerun"
)

// TriageItem is a failed run waiting for, or decided by, a reviewer.
type TriageItem struct {
	ID         int64                 `db:"id"`
	MessageID  int64                 `db:"message_id"`
	ExternalID string                `db:"external_id"` // the message's own id
	RunNo      int                   `db:"run_no"`
	SchemaID   string                `db:"schema_id"`
	Status     string                `db:"status"` // TriageOpen, TriageApproved, TriageRejected or TriageRerun
	Reason     string                `db:"reason"` // the kind that failed the run
	Errors     extracttype.ErrorList `db:"errors"` // the final error list
	LastReply  string                `db:"last_reply"`
	CreatedAt  time.Time             `db:"created_at"`
}

// TriageItemListParams selects triage items.
type TriageItemListParams struct {
	// BatchID keeps the items of the batch's runs; empty means all.
	BatchID string
	// Status keeps items in this status. Default TriageOpen.
	Status string
	// Limit is the most rows returned. Default 100.
	Limit int
}

const triageItemListSQL = `
SELECT t.id, t.message_id, m.external_id, t.run_no, t.schema_id, t.status, t.reason,
       t.errors, t.last_reply, t.created_at
FROM triage_items t
JOIN runs r ON r.message_id = t.message_id AND r.run_no = t.run_no
JOIN messages m ON m.id = t.message_id
WHERE t.status = $1 AND ($2 = '' OR r.batch_id = $2)
ORDER BY t.created_at, t.id
LIMIT $3`

// TriageItemList returns triage items, oldest first.
func (s *Store) TriageItemList(ctx context.Context, db DBTX, p TriageItemListParams) ([]TriageItem, error) {
	status := cmp.Or(p.Status, TriageOpen)
	rows, err := db.Query(ctx, triageItemListSQL, status, p.BatchID, limitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("store.TriageItemList(%q, %q): %w", p.BatchID, status, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[TriageItem])
	if err != nil {
		return nil, fmt.Errorf("store.TriageItemList(%q, %q): %w", p.BatchID, status, err)
	}
	return out, nil
}

// TriageItemRef names a run's triage item: its id and when it was created.
type TriageItemRef struct {
	ID        int64     `db:"id"`
	CreatedAt time.Time `db:"created_at"`
}

// TriageItemOfRun returns the triage item of run (messageID, runNo); a run
// has at most one (triage_items_run_key). ErrNotFound when it has none.
func (s *Store) TriageItemOfRun(ctx context.Context, db DBTX, messageID int64, runNo int) (TriageItemRef, error) {
	rows, err := db.Query(ctx, `SELECT id, created_at FROM triage_items WHERE message_id = $1 AND run_no = $2`, messageID, runNo)
	if err != nil {
		return TriageItemRef{}, fmt.Errorf("store.TriageItemOfRun(%d, %d): %w", messageID, runNo, interpretError(err))
	}
	ref, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[TriageItemRef])
	if err != nil {
		return TriageItemRef{}, fmt.Errorf("store.TriageItemOfRun(%d, %d): %w", messageID, runNo, interpretError(err))
	}
	return ref, nil
}

// TriageOpenCount returns how many triage items are open (the partial
// index triage_items_open_idx).
func (s *Store) TriageOpenCount(ctx context.Context, db DBTX) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM triage_items WHERE status = 'open'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store.TriageOpenCount: %w", interpretError(err))
	}
	return n, nil
}
