package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Errors of the triage queue.
var (
	// ErrClaimed means another reviewer holds a live lease on the item.
	// The returned error is an *ItemClaimedError naming who and until when.
	ErrClaimed = errors.New("triage item is claimed by another reviewer")
	// ErrItemClosed means the item is no longer open: it was approved,
	// rejected or sent to a re-run.
	ErrItemClosed = errors.New("triage item is not open")
)

// ItemClaimedError says who holds the lease on an item. It matches
// ErrClaimed with errors.Is.
type ItemClaimedError struct {
	ItemID int64
	By     string    // the login holding the lease
	Until  time.Time // when the lease runs out
}

func (e *ItemClaimedError) Error() string {
	return fmt.Sprintf("triage item %d is claimed by %s until %s", e.ItemID, e.By, e.Until.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrClaimed.
func (e *ItemClaimedError) Is(target error) bool { return target == ErrClaimed }

// ItemClosedError says what became of an item that is no longer open. It
// matches ErrItemClosed with errors.Is.
type ItemClosedError struct {
	ItemID int64
	Status string // TriageApproved, TriageRejected or TriageRerun
}

func (e *ItemClosedError) Error() string {
	return fmt.Sprintf("triage item %d is %s, no longer open", e.ItemID, e.Status)
}

// Is reports whether target is ErrItemClosed.
func (e *ItemClosedError) Is(target error) bool { return target == ErrItemClosed }

// DefaultLease is how long a claim lasts when the caller names no lease.
const DefaultLease = 10 * time.Minute

// TriageClaim is a lease on an item.
type TriageClaim struct {
	ItemID    int64
	ClaimedBy string
	Expires   time.Time
	// Renewed is true when the reviewer already held the lease and it was
	// extended; false for a new claim.
	Renewed bool
}

// TriageItemClaimParams claims one item.
type TriageItemClaimParams struct {
	ItemID   int64
	Reviewer string        // the login; required
	Lease    time.Duration // default DefaultLease
	Via      string        // for the audit log: ViaUI or ViaAPI; required
}

const triageItemClaimSQL = `
WITH old AS (
    SELECT id, claimed_by, claim_expires FROM triage_items WHERE id = $1 FOR UPDATE
), upd AS (
    UPDATE triage_items t
    SET claimed_by = $2, claim_expires = now() + $3 * interval '1 microsecond', updated_at = now()
    FROM old
    WHERE t.id = old.id AND t.status = 'open'
      AND (t.claimed_by IS NULL OR t.claim_expires <= now() OR t.claimed_by = $2)
    RETURNING t.id, t.message_id, t.run_no, t.claim_expires
)
SELECT upd.id, upd.message_id, upd.run_no, upd.claim_expires,
       coalesce(old.claimed_by = $2 AND old.claim_expires > now(), false) AS renewed
FROM upd JOIN old ON old.id = upd.id`

// TriageItemClaim gives the reviewer a lease on the item, or extends the
// lease it holds. A new claim is written to the audit log; a renewal is
// not. It returns an *ItemClaimedError when another reviewer holds a live
// lease, an *ItemClosedError when the item is not open, and an error
// wrapping ErrNotFound for an unknown item.
func (s *Store) TriageItemClaim(ctx context.Context, db DBTX, p TriageItemClaimParams) (TriageClaim, error) {
	if p.Reviewer == "" || p.Via == "" {
		return TriageClaim{}, fmt.Errorf("store.TriageItemClaim(%d): reviewer and via are required", p.ItemID)
	}
	lease := leaseOr(p.Lease)
	var c TriageClaim
	err := inTx(ctx, db, func(tx DBTX) error {
		var msgID int64
		var runNo int
		err := tx.QueryRow(ctx, triageItemClaimSQL, p.ItemID, p.Reviewer, lease.Microseconds()).
			Scan(&c.ItemID, &msgID, &runNo, &c.Expires, &c.Renewed)
		if errors.Is(err, pgx.ErrNoRows) {
			return whyNotClaimable(ctx, tx, p.ItemID)
		}
		if err != nil {
			return err
		}
		c.ClaimedBy = p.Reviewer
		if c.Renewed {
			return nil
		}
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditClaim, TriageItemID: c.ItemID, MessageID: msgID, RunNo: runNo,
			After: map[string]any{"claimed_by": p.Reviewer, "claim_expires": c.Expires},
		})
	})
	if err != nil {
		return TriageClaim{}, fmt.Errorf("store.TriageItemClaim(%d, %q): %w", p.ItemID, p.Reviewer, err)
	}
	return c, nil
}

// whyNotClaimable explains why item id could not be claimed or decided:
// ErrNotFound, an *ItemClosedError, or an *ItemClaimedError.
func whyNotClaimable(ctx context.Context, db DBTX, id int64) error {
	var status string
	var by *string
	var until *time.Time
	var live bool
	err := db.QueryRow(ctx, `
SELECT status, claimed_by, claim_expires, coalesce(claim_expires > now(), false)
FROM triage_items WHERE id = $1`, id).Scan(&status, &by, &until, &live)
	if err != nil {
		return interpretError(err)
	}
	if status != TriageOpen {
		return &ItemClosedError{ItemID: id, Status: status}
	}
	if live && by != nil && until != nil {
		return &ItemClaimedError{ItemID: id, By: *by, Until: *until}
	}
	// Locked by a transaction that has since ended: the caller may retry.
	return &ItemClaimedError{ItemID: id, By: "another reviewer", Until: time.Now()}
}

// TriageItemClaimNextParams claims the next item of a filter.
type TriageItemClaimNextParams struct {
	// Filter selects the items; its Status is always open and its
	// ClaimedBy is ignored.
	Filter   TriageFilter
	Reviewer string        // the login; required
	Lease    time.Duration // default DefaultLease
	Via      string        // ViaUI or ViaAPI; required
	// AfterID, when not 0, skips the items up to and including this one in
	// the queue order, so a reviewer can pass over an item.
	AfterID int64
}

// TriageItemClaimNext claims the oldest open item matching the filter that
// no other reviewer holds, taking rows other transactions have locked off
// the list (FOR UPDATE SKIP LOCKED), so concurrent reviewers each get a
// different item. An item the reviewer already holds comes first (its
// lease is extended, Renewed is true, and no audit entry is written). It
// returns an error wrapping ErrNotFound when no item is left.
func (s *Store) TriageItemClaimNext(ctx context.Context, db DBTX, p TriageItemClaimNextParams) (TriageClaim, error) {
	if p.Reviewer == "" || p.Via == "" {
		return TriageClaim{}, fmt.Errorf("store.TriageItemClaimNext: reviewer and via are required")
	}
	f := p.Filter
	f.Status, f.ClaimedBy = TriageOpen, ""
	var a sqlArgs
	me := a.add(p.Reviewer)
	lease := a.add(leaseOr(p.Lease).Microseconds())
	after := ""
	if p.AfterID != 0 {
		after = " AND (t.created_at, t.id) > (SELECT created_at, id FROM triage_items WHERE id = " + a.add(p.AfterID) + ")"
	}
	q := `
WITH next AS (
    SELECT t.id, coalesce(t.claimed_by = ` + me + ` AND t.claim_expires > now(), false) AS renewed` + triageFrom + `
    WHERE ` + f.where(&a) + after + `
      AND (t.claimed_by IS NULL OR t.claim_expires <= now() OR t.claimed_by = ` + me + `)
    ORDER BY (t.claimed_by = ` + me + ` AND t.claim_expires > now()) IS TRUE DESC, t.created_at, t.id
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE triage_items t
SET claimed_by = ` + me + `, claim_expires = now() + ` + lease + ` * interval '1 microsecond', updated_at = now()
FROM next
WHERE t.id = next.id
RETURNING t.id, t.message_id, t.run_no, t.claim_expires, next.renewed`
	var c TriageClaim
	err := inTx(ctx, db, func(tx DBTX) error {
		var msgID int64
		var runNo int
		err := tx.QueryRow(ctx, q, a.args...).Scan(&c.ItemID, &msgID, &runNo, &c.Expires, &c.Renewed)
		if err != nil {
			return interpretError(err)
		}
		c.ClaimedBy = p.Reviewer
		if c.Renewed {
			return nil // a lease extended is not a new claim
		}
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditClaim, TriageItemID: c.ItemID, MessageID: msgID, RunNo: runNo,
			After: map[string]any{"claimed_by": p.Reviewer, "claim_expires": c.Expires},
		})
	})
	if err != nil {
		return TriageClaim{}, fmt.Errorf("store.TriageItemClaimNext(%q): %w", p.Reviewer, err)
	}
	return c, nil
}

// TriageItemReleaseParams gives up a lease.
type TriageItemReleaseParams struct {
	ItemID   int64
	Reviewer string // required
	Via      string // required
}

// TriageItemRelease ends the reviewer's lease on the item so others may
// claim it, and records it in the audit log. An item under another
// reviewer's live lease is an *ItemClaimedError, as a decision on it is;
// an unknown item wraps ErrNotFound. Releasing an item nobody holds (or
// whose lease ran out, or that is decided) changes nothing and returns
// false.
func (s *Store) TriageItemRelease(ctx context.Context, db DBTX, p TriageItemReleaseParams) (bool, error) {
	var released bool
	err := inTx(ctx, db, func(tx DBTX) error {
		var msgID int64
		var runNo int
		err := tx.QueryRow(ctx, `
UPDATE triage_items SET claimed_by = NULL, claim_expires = NULL, updated_at = now()
WHERE id = $1 AND claimed_by = $2 AND status = 'open'
RETURNING message_id, run_no`, p.ItemID, p.Reviewer).Scan(&msgID, &runNo)
		if errors.Is(err, pgx.ErrNoRows) {
			var by *string
			var until *time.Time
			var live bool
			err := tx.QueryRow(ctx, `
SELECT claimed_by, claim_expires, status = 'open' AND coalesce(claim_expires > now(), false)
FROM triage_items WHERE id = $1`, p.ItemID).Scan(&by, &until, &live)
			if err != nil {
				return interpretError(err)
			}
			if live && by != nil && *by != p.Reviewer {
				return &ItemClaimedError{ItemID: p.ItemID, By: *by, Until: *until}
			}
			return nil
		}
		if err != nil {
			return err
		}
		released = true
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditRelease, TriageItemID: p.ItemID, MessageID: msgID, RunNo: runNo,
			Before: map[string]any{"claimed_by": p.Reviewer},
		})
	})
	if err != nil {
		return false, fmt.Errorf("store.TriageItemRelease(%d, %q): %w", p.ItemID, p.Reviewer, err)
	}
	return released, nil
}

func leaseOr(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultLease
	}
	return d
}

// lockedItem is an open item locked for a decision.
type lockedItem struct {
	ID        int64
	MessageID int64
	RunNo     int
	SchemaID  string
	BatchID   string
	Reason    string
	ClaimedBy *string
	Errors    []byte
}

// lockItemForDecision locks item id (SELECT ... FOR UPDATE) in tx and
// checks that reviewer may decide it: it must be open, and not under
// another reviewer's live lease (the reviewer need not hold one).
func lockItemForDecision(ctx context.Context, tx DBTX, id int64, reviewer string) (lockedItem, error) {
	var it lockedItem
	var status string
	var until *time.Time
	var live bool
	err := tx.QueryRow(ctx, `
SELECT t.id, t.message_id, t.run_no, t.schema_id, r.batch_id, t.reason, t.claimed_by, t.errors,
       t.status, t.claim_expires, coalesce(t.claim_expires > now(), false)
FROM triage_items t
JOIN runs r ON r.message_id = t.message_id AND r.run_no = t.run_no
WHERE t.id = $1
FOR UPDATE OF t`, id).Scan(&it.ID, &it.MessageID, &it.RunNo, &it.SchemaID, &it.BatchID, &it.Reason,
		&it.ClaimedBy, &it.Errors, &status, &until, &live)
	if err != nil {
		return it, interpretError(err)
	}
	if status != TriageOpen {
		return it, &ItemClosedError{ItemID: id, Status: status}
	}
	if live && it.ClaimedBy != nil && *it.ClaimedBy != reviewer {
		return it, &ItemClaimedError{ItemID: id, By: *it.ClaimedBy, Until: *until}
	}
	return it, nil
}
