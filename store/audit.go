package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Where an audited action came from (audit_log.via).
const (
	ViaUI  = "ui"  // the web pages
	ViaAPI = "api" // the JSON API
	ViaCLI = "cli" // the admin command
)

// Audited actions (audit_log.action).
const (
	AuditClaim          = "claim"
	AuditRelease        = "release"
	AuditApprove        = "approve"
	AuditReject         = "reject"
	AuditRerun          = "rerun"
	AuditBulkRerun      = "bulk_rerun"
	AuditLogin          = "login"
	AuditLoginFailed    = "login_failed" // actor: the login tried; reason: why; after: the client's address
	AuditLogout         = "logout"
	AuditReviewerCreate = "reviewer_create"
	AuditReviewerUpdate = "reviewer_update"
	AuditTokenCreate    = "token_create"
	AuditTokenRevoke    = "token_revoke"
	AuditRoleSet        = "role_set"
	// AuditForbidden is a request refused for its role (403): reason says
	// which route, after holds route, role, path and any token_id.
	AuditForbidden = "forbidden"
)

// AuditEntry is one row of the audit log: who did what, when, to what,
// with the state before and after. Rows are never changed.
type AuditEntry struct {
	ID           int64           `db:"id" json:"id"`
	At           time.Time       `db:"at" json:"at"`
	Actor        string          `db:"actor" json:"actor"`   // the reviewer's login, or the admin's name
	Via          string          `db:"via" json:"via"`       // ViaUI, ViaAPI or ViaCLI
	Action       string          `db:"action" json:"action"` // such as AuditApprove
	TriageItemID *int64          `db:"triage_item_id" json:"triage_item_id"`
	MessageID    *int64          `db:"message_id" json:"message_id"`
	RunNo        *int            `db:"run_no" json:"run_no"`
	Reason       string          `db:"reason" json:"reason"` // the written reason, if any
	Before       json.RawMessage `db:"before" json:"before"` // a JSON object, or nil
	After        json.RawMessage `db:"after" json:"after"`   // a JSON object, or nil
}

// AuditInsertParams is an action to record.
type AuditInsertParams struct {
	Actor        string // required
	Via          string // required: ViaUI, ViaAPI or ViaCLI
	Action       string // required
	TriageItemID int64  // 0 when the action is not about one item
	MessageID    int64  // 0 when none
	RunNo        int    // 0 when none
	Reason       string
	Before       any // encoded as JSON; nil means none
	After        any // encoded as JSON; nil means none
}

const auditInsertSQL = `
INSERT INTO audit_log (actor, via, action, triage_item_id, message_id, run_no, reason, before, after)
VALUES ($1, $2, $3, nullif($4::bigint, 0), nullif($5::bigint, 0), nullif($6::int, 0), $7, $8, $9)`

// AuditInsert appends an entry to the audit log. Call it in the
// transaction of the action it records.
func (s *Store) AuditInsert(ctx context.Context, db DBTX, p AuditInsertParams) error {
	return auditInsert(ctx, db, p)
}

func auditInsert(ctx context.Context, db DBTX, p AuditInsertParams) error {
	if p.Actor == "" || p.Via == "" || p.Action == "" {
		return fmt.Errorf("store.AuditInsert(%q): actor, via and action are required", p.Action)
	}
	before, err := auditJSON(p.Before)
	if err != nil {
		return fmt.Errorf("store.AuditInsert(%q): before: %w", p.Action, err)
	}
	after, err := auditJSON(p.After)
	if err != nil {
		return fmt.Errorf("store.AuditInsert(%q): after: %w", p.Action, err)
	}
	_, err = db.Exec(ctx, auditInsertSQL, CleanText(p.Actor), p.Via, p.Action,
		p.TriageItemID, p.MessageID, p.RunNo, CleanText(p.Reason), before, after)
	if err != nil {
		return fmt.Errorf("store.AuditInsert(%q): %w", p.Action, interpretError(err))
	}
	return nil
}

// auditJSON encodes v for a jsonb column: nil for nil, cleaned JSON else.
func auditJSON(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	var b []byte
	switch t := v.(type) {
	case json.RawMessage:
		b = t
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	if len(b) == 0 {
		return nil, nil
	}
	return CleanJSON(b), nil
}

// AuditListParams selects audit entries.
type AuditListParams struct {
	// TriageItemID keeps one item's entries; 0 means all.
	TriageItemID int64
	// Actor keeps one person's entries; empty means all.
	Actor string
	// Limit is the most rows returned. Default 100.
	Limit int
}

const auditListSQL = `
SELECT id, at, actor, via, action, triage_item_id, message_id, run_no, reason, before, after
FROM audit_log
WHERE ($1 = 0 OR triage_item_id = $1) AND ($2 = '' OR actor = $2)
ORDER BY at DESC, id DESC
LIMIT $3`

// AuditList returns audit entries, newest first.
func (s *Store) AuditList(ctx context.Context, db DBTX, p AuditListParams) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, auditListSQL, p.TriageItemID, p.Actor, limitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("store.AuditList(%d, %q): %w", p.TriageItemID, p.Actor, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[AuditEntry])
	if err != nil {
		return nil, fmt.Errorf("store.AuditList(%d, %q): %w", p.TriageItemID, p.Actor, err)
	}
	return out, nil
}
