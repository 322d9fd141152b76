package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditReopen is a decision undone (TriageItemReopen).
const AuditReopen = "reopen"

// ErrReopenRefused means a decision may not be undone: it is not the
// reviewer's own, it is a re-run (whose run is on its way), or its time
// to undo is over.
var ErrReopenRefused = errors.New("the decision may not be undone")

// TriageItemReopenParams is a reviewer undoing their own decision.
type TriageItemReopenParams struct {
	ItemID   int64
	Reviewer string        // required: only the reviewer who decided may undo
	Via      string        // required
	Within   time.Duration // required: how long after the decision it may be undone
}

// TriageItemReopen undoes an approval or a rejection the reviewer made
// less than Within ago, in one transaction: the item is open again,
// claimed by the reviewer, its decision cleared; an approval's record
// (the extraction it wrote) is deleted, so the message's result is what
// it was before; the audit log gets a reopen entry with the decision
// before, and the results outbox a retracted event. An open item, one whose message was erased, a re-run, another reviewer's decision, or one
// older than Within returns an error wrapping ErrReopenRefused; an
// unknown item ErrNotFound.
func (s *Store) TriageItemReopen(ctx context.Context, db DBTX, p TriageItemReopenParams) error {
	fail := func(err error) error {
		return fmt.Errorf("store.TriageItemReopen(%d, %q): %w", p.ItemID, p.Reviewer, err)
	}
	if p.Reviewer == "" || p.Via == "" || p.Within <= 0 {
		return fail(fmt.Errorf("reviewer, via and a time to undo are required"))
	}
	return inTx(ctx, db, func(tx DBTX) error {
		var (
			messageID      int64
			runNo          int
			status, reason string
			decidedBy      *string
			decidedAt      *time.Time
			inTime, erased bool
		)
		err := tx.QueryRow(ctx, `
SELECT t.message_id, t.run_no, t.status, t.decision_reason, t.decided_by, t.decided_at,
       coalesce(t.decided_at > now() - $2 * interval '1 microsecond', false), m.erased_at IS NOT NULL
FROM triage_items t JOIN messages m ON m.id = t.message_id WHERE t.id = $1 FOR UPDATE OF t`, p.ItemID, p.Within.Microseconds()).Scan(
			&messageID, &runNo, &status, &reason, &decidedBy, &decidedAt, &inTime, &erased)
		if errors.Is(err, pgx.ErrNoRows) {
			return fail(ErrNotFound)
		}
		if err != nil {
			return fail(err)
		}
		switch {
		case erased:
			return fail(fmt.Errorf("%w: the text of item %d's message was erased", ErrReopenRefused, p.ItemID))
		case status == TriageOpen:
			return fail(fmt.Errorf("%w: item %d is open, not decided", ErrReopenRefused, p.ItemID))
		case status == TriageRerun:
			return fail(fmt.Errorf("%w: item %d was re-run; its new run decides it", ErrReopenRefused, p.ItemID))
		case decidedBy == nil || *decidedBy != p.Reviewer:
			return fail(fmt.Errorf("%w: item %d was decided by someone else", ErrReopenRefused, p.ItemID))
		case !inTime:
			return fail(fmt.Errorf("%w: item %d was decided at %s; a decision may be undone for %s after it", ErrReopenRefused,
				p.ItemID, decidedAt.UTC().Format(time.RFC3339), p.Within))
		}
		before := map[string]any{"status": status, "decided_by": *decidedBy, "decided_at": decidedAt.UTC(), "decision_reason": reason}
		if status == TriageApproved {
			var data []byte
			err := tx.QueryRow(ctx, `DELETE FROM extractions WHERE message_id = $1 AND run_no = $2 AND outcome = 'approved' RETURNING data`,
				messageID, runNo).Scan(&data)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fail(fmt.Errorf("delete the approved record: %w", err))
			}
			if data != nil {
				before["data"] = json.RawMessage(data)
			}
		}
		if _, err := tx.Exec(ctx, `
UPDATE triage_items
SET status = 'open', decided_by = NULL, decided_at = NULL, decision_reason = '',
    claimed_by = $2, claim_expires = now() + interval '10 minutes', updated_at = now()
WHERE id = $1`, p.ItemID, p.Reviewer); err != nil {
			return fail(fmt.Errorf("reopen: %w", err))
		}
		if err := outboxDecision(ctx, tx, messageID, runNo, EventRetracted, "", "", nil,
			map[string]any{"undone": status, "decided_by": p.Reviewer}); err != nil {
			return fail(err)
		}
		return auditInsert(ctx, tx, AuditInsertParams{Actor: p.Reviewer, Via: p.Via, Action: AuditReopen, TriageItemID: p.ItemID,
			MessageID: messageID, RunNo: runNo, Before: before, After: map[string]any{"status": TriageOpen, "claimed_by": p.Reviewer}})
	})
}
