package store

import (
	"fmt"
	"strings"
)

// Role is what an account, or an API token, may do (reviewers.role,
// api_tokens.role; migration 000015). docs/triage.md, "Roles", has the
// table of routes each may use.
type Role string

// The roles. Admin may do all a reviewer may, and a reviewer all an
// analyst may; ingest is a role of API tokens only, for the programs that
// feed `ingest serve`.
const (
	// RoleAdmin: accounts, tokens, bulk re-runs, erasures, the audit log,
	// and all a reviewer may.
	RoleAdmin Role = "admin"
	// RoleReviewer works the queue: reads items and decides them.
	RoleReviewer Role = "reviewer"
	// RoleAnalyst reads reports and aggregate views, never customer text.
	RoleAnalyst Role = "analyst"
	// RoleIngest sends messages to `ingest serve` and reads its batches
	// and their results; nothing of triage. Tokens only, of an admin's
	// account.
	RoleIngest Role = "ingest"
)

// AccountRoles are the roles an account may have, widest first.
var AccountRoles = []Role{RoleAdmin, RoleReviewer, RoleAnalyst}

// TokenRoles are the roles an API token may have.
var TokenRoles = []Role{RoleAdmin, RoleReviewer, RoleAnalyst, RoleIngest}

// ParseRole returns the role named s, one of allowed; the error names
// them.
func ParseRole(s string, allowed []Role) (Role, error) {
	for _, r := range allowed {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(allowed))
	for i, r := range allowed {
		names[i] = string(r)
	}
	return "", fmt.Errorf("role %q: want one of %s", s, strings.Join(names, ", "))
}

// Covers reports whether an account of role r may hold a token of role
// t: an admin any, a reviewer a reviewer's or an analyst's, an analyst an
// analyst's.
func (r Role) Covers(t Role) bool {
	switch r {
	case RoleAdmin:
		return true
	case RoleReviewer:
		return t == RoleReviewer || t == RoleAnalyst
	case RoleAnalyst:
		return t == RoleAnalyst
	}
	return false
}
