package triage

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/extractq/extractq/store"
)

// Roles (docs/triage.md, "Roles"): each route admits a set of roles
// (access); a request acts with its API token's role, else its account's.
// Any other role is refused 403 (code forbidden), and the refusal is
// audited (store.AuditForbidden). The route × role table in the docs is
// checked by TestRouteRoles.

// access is the roles a route admits.
type access []store.Role

var (
	// anyAccount: every account (reports and aggregate views).
	anyAccount = access{store.RoleAdmin, store.RoleReviewer, store.RoleAnalyst}
	// anyToken: every account, and ingest tokens (GET /api/v1/me only).
	anyToken = access{store.RoleAdmin, store.RoleReviewer, store.RoleAnalyst, store.RoleIngest}
	// reviewers: who reads customer text and decides items.
	reviewers = access{store.RoleAdmin, store.RoleReviewer}
	// admins: bulk re-runs by filter and the whole audit log.
	admins = access{store.RoleAdmin}
)

func (a access) admits(r store.Role) bool { return slices.Contains(a, r) }

func (a access) String() string {
	names := make([]string, len(a))
	for i, r := range a {
		names[i] = string(r)
	}
	return strings.Join(names, " or ")
}

// roleFrom returns the role an authenticated request acts with: its API
// token's, else its account's. Serving without accounts (LocalOnly),
// everyone is admin.
func roleFrom(ctx context.Context) store.Role {
	if t := tokenFrom(ctx); t != nil {
		return t.Role
	}
	if rv := reviewerFrom(ctx); rv != nil {
		return rv.Role
	}
	return ""
}

// authorize returns nil when the request's role is one a admits, else
// audits the refusal and returns an error wrapping ErrForbidden saying
// which roles the route needs. r's context carries the reviewer.
func (s *Server) authorize(r *http.Request, a access) error {
	ctx := r.Context()
	role := roleFrom(ctx)
	if a.admits(role) {
		return nil
	}
	rv := reviewerFrom(ctx)
	route := r.Pattern
	if route == "" {
		route = r.Method + " " + r.URL.Path
	}
	after := map[string]any{"route": route, "role": role, "path": r.URL.Path}
	if t := tokenFrom(ctx); t != nil {
		after["token_id"] = t.ID
	}
	if err := s.st.AuditInsert(ctx, s.st.Pool, store.AuditInsertParams{Actor: rv.Login, Via: viaFrom(ctx),
		Action: store.AuditForbidden, Reason: "role " + string(role) + " may not " + route, After: after}); err != nil {
		return err
	}
	s.log.Info("refused: role", zap.String("login", rv.Login), zap.String("role", string(role)), zap.String("route", route))
	what := "your account"
	if tokenFrom(ctx) != nil {
		what = "this API token"
	}
	return fmt.Errorf("%w: %s has the role %s; %s needs %s", ErrForbidden, what, role, route, a)
}

// Can reports whether the page's reviewer acts with a role a route of
// the named access admits: "review" (reviewers), "admin" (admins).
func (d pageData) Can(what string) bool {
	switch what {
	case "review":
		return reviewers.admits(d.Role)
	case "admin":
		return admins.admits(d.Role)
	}
	return false
}
