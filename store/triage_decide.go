package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/extractq/extractq/extracttype"
)

// TriageItemApproveParams is a reviewer's record for a failed run.
//
// The caller must have validated Data with the same validator as the
// worker (pipeline.Schema.Validate) against the message text: the store
// does not, and nothing unvalidated may become a result. Overridden
// errors are the grounding errors the reviewer accepted with a reason.
type TriageItemApproveParams struct {
	ItemID        int64
	Reviewer      string          // the login; required
	Via           string          // ViaUI or ViaAPI; required
	Data          json.RawMessage // the validated record; required
	Evidence      json.RawMessage // grounding evidence, a JSON array; nil means []
	SchemaVersion string          // the schema version Data was validated against; required
	// Overridden lists the grounding errors the reviewer overrode; empty
	// when the record validated. OverrideReason is then required.
	Overridden     extracttype.ErrorList
	OverrideReason string
}

// TriageApproval is what an approval wrote.
type TriageApproval struct {
	ItemID    int64
	MessageID int64
	RunNo     int
	DecidedBy string
	DecidedAt time.Time
}

// TriageItemApprove makes the reviewer's record the result of the item's
// failed run, in one transaction: an extraction (outcome approved,
// created_by the reviewer), the item closed as approved with who and when,
// the results outbox's result event, and an audit entry with the state
// before and after. The item must be
// open and not under another reviewer's live lease (*ItemClosedError,
// *ItemClaimedError); unknown items wrap ErrNotFound.
func (s *Store) TriageItemApprove(ctx context.Context, db DBTX, p TriageItemApproveParams) (TriageApproval, error) {
	fail := func(err error) (TriageApproval, error) {
		return TriageApproval{}, fmt.Errorf("store.TriageItemApprove(%d, %q): %w", p.ItemID, p.Reviewer, err)
	}
	switch {
	case p.Reviewer == "" || p.Via == "":
		return fail(fmt.Errorf("reviewer and via are required"))
	case len(p.Data) == 0 || p.SchemaVersion == "":
		return fail(fmt.Errorf("data and schema version are required"))
	case len(p.Overridden) > 0 && strings.TrimSpace(p.OverrideReason) == "":
		return fail(fmt.Errorf("overriding errors needs a written reason"))
	}
	evidence := CleanJSON(p.Evidence)
	if len(evidence) == 0 {
		evidence = json.RawMessage(`[]`)
	}
	var out TriageApproval
	err := inTx(ctx, db, func(tx DBTX) error {
		it, err := lockItemForDecision(ctx, tx, p.ItemID, p.Reviewer)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, extractionInsertSQL, it.MessageID, it.RunNo, it.SchemaID, p.SchemaVersion,
			"approved", CleanJSON(p.Data), evidence, p.Reviewer)
		if err != nil {
			return fmt.Errorf("insert extraction: %w", interpretError(err))
		}
		err = tx.QueryRow(ctx, `
UPDATE triage_items
SET status = 'approved', decided_by = $2, decided_at = now(), decision_reason = $3,
    claimed_by = NULL, claim_expires = NULL, updated_at = now()
WHERE id = $1
RETURNING decided_at`, it.ID, p.Reviewer, CleanText(p.OverrideReason)).Scan(&out.DecidedAt)
		if err != nil {
			return fmt.Errorf("close item: %w", err)
		}
		out = TriageApproval{ItemID: it.ID, MessageID: it.MessageID, RunNo: it.RunNo, DecidedBy: p.Reviewer, DecidedAt: out.DecidedAt}
		if err := outboxDecision(ctx, tx, it.MessageID, it.RunNo, EventResult, p.SchemaVersion, "approved",
			CleanJSON(p.Data), map[string]any{"decided_by": p.Reviewer}); err != nil {
			return err
		}
		after := map[string]any{
			"status": TriageApproved, "data": json.RawMessage(CleanJSON(p.Data)), "schema_version": p.SchemaVersion,
			"decided_by": p.Reviewer,
		}
		if len(p.Overridden) > 0 {
			after["overridden_errors"] = p.Overridden
		}
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditApprove, TriageItemID: it.ID, MessageID: it.MessageID,
			RunNo: it.RunNo, Reason: p.OverrideReason, Before: it.before(), After: after,
		})
	})
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// before is the audit log's view of an open item.
func (it lockedItem) before() map[string]any {
	m := map[string]any{"status": TriageOpen, "reason": it.Reason, "errors": json.RawMessage(it.Errors)}
	if it.ClaimedBy != nil {
		m["claimed_by"] = *it.ClaimedBy
	}
	return m
}

// TriageItemRejectParams is a reviewer's rejection of an item.
type TriageItemRejectParams struct {
	ItemID   int64
	Reviewer string // required
	Via      string // required
	Reason   string // required: why no record can be made
}

// TriageItemReject closes the item as rejected with the reviewer's
// reason, in one transaction with its audit entry and the results
// outbox's rejected event. No result is written.
// Errors are as TriageItemApprove's.
func (s *Store) TriageItemReject(ctx context.Context, db DBTX, p TriageItemRejectParams) (time.Time, error) {
	fail := func(err error) (time.Time, error) {
		return time.Time{}, fmt.Errorf("store.TriageItemReject(%d, %q): %w", p.ItemID, p.Reviewer, err)
	}
	if p.Reviewer == "" || p.Via == "" || strings.TrimSpace(p.Reason) == "" {
		return fail(fmt.Errorf("reviewer, via and reason are required"))
	}
	var at time.Time
	err := inTx(ctx, db, func(tx DBTX) error {
		it, err := lockItemForDecision(ctx, tx, p.ItemID, p.Reviewer)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
UPDATE triage_items
SET status = 'rejected', decided_by = $2, decided_at = now(), decision_reason = $3,
    claimed_by = NULL, claim_expires = NULL, updated_at = now()
WHERE id = $1
RETURNING decided_at`, it.ID, p.Reviewer, CleanText(p.Reason)).Scan(&at)
		if err != nil {
			return fmt.Errorf("close item: %w", err)
		}
		if err := outboxDecision(ctx, tx, it.MessageID, it.RunNo, EventRejected, "", "", nil,
			map[string]any{"decided_by": p.Reviewer}); err != nil {
			return err
		}
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditReject, TriageItemID: it.ID, MessageID: it.MessageID,
			RunNo: it.RunNo, Reason: p.Reason, Before: it.before(),
			After: map[string]any{"status": TriageRejected, "decided_by": p.Reviewer},
		})
	})
	if err != nil {
		return fail(err)
	}
	return at, nil
}
