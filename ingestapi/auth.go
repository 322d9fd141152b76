package ingestapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/store"
)

// Roles of the ingest API (docs/input.md, "Tokens and roles"). A request
// acts with a role: that of its API token (triage admin token create; its
// expiry is the token's), admin for the server's own token
// (ServerConfig.Token), and admin too when the server runs without any
// token, on loopback only. Each route admits some roles (routeAccess); any
// other is 403 forbidden, and the refusal is audited. The route × role
// table of docs/triage.md is checked by a test walking every route.

// routeAccess is the roles each API route admits.
var routeAccess = map[string][]store.Role{
	// Writing messages: programs that feed the server, and admins.
	"POST /v1/messages": {store.RoleAdmin, store.RoleIngest},
	// A webhook without a signature, as POST /v1/messages; a signed one
	// needs no token (its signature authenticates it: webhooks.go).
	"POST /v1/webhooks/{name}": {store.RoleAdmin, store.RoleIngest},
	// A batch's counts hold no customer text: every role.
	"GET /v1/batches/{id}": {store.RoleAdmin, store.RoleIngest, store.RoleReviewer, store.RoleAnalyst},
	// Results are customer data: who sent it, and who reads it in triage.
	"GET /v1/batches/{id}/results": {store.RoleAdmin, store.RoleIngest, store.RoleReviewer},
	// Erasures: admins only.
	"POST /v1/erasures": {store.RoleAdmin},
}

// principal is who a request acts as.
type principal struct {
	login string
	role  store.Role
	token *store.APIToken // nil for the server's own token, or none
}

// localPrincipal acts for every request of a server without a token
// (loopback only).
var localPrincipal = principal{login: "local", role: store.RoleAdmin}

// authorize authenticates r and checks that its role may use route (a key
// of routeAccess). The error is unauthenticated (401, with
// WWW-Authenticate set) or forbidden (403, audited).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, route string) error {
	p, err := s.authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="extractq-ingest"`)
		return err
	}
	allowed := routeAccess[route]
	if slices.Contains(allowed, p.role) {
		return nil
	}
	after := map[string]any{"route": route, "role": p.role, "path": r.URL.Path}
	if p.token != nil {
		after["token_id"] = p.token.ID
	}
	if err := s.cfg.Store.AuditInsert(r.Context(), s.cfg.Store.Pool, store.AuditInsertParams{Actor: p.login, Via: store.ViaAPI,
		Action: store.AuditForbidden, Reason: "role " + string(p.role) + " may not " + route, After: after}); err != nil {
		return &httperr.Error{Code: httperr.Unavailable, Message: "cannot record the refusal (is Postgres down?); try again later", Err: err}
	}
	s.log.Info("refused: role", zap.String("login", p.login), zap.String("role", string(p.role)), zap.String("route", route))
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return httperr.Errorf(httperr.Forbidden, "this token has the role %s; %s needs %s", p.role, route, strings.Join(names, " or "))
}

// authenticate returns who r acts as: without a token configured
// (neither Token nor APITokens), everyone is localPrincipal; else r must
// carry "Authorization: Bearer T" where T is Token (admin) or, with
// APITokens, a live API token of an enabled account (its role).
func (s *Server) authenticate(r *http.Request) (principal, error) {
	if s.cfg.Token == "" && !s.cfg.APITokens {
		return localPrincipal, nil
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return principal{}, httperr.New(httperr.Unauthenticated, "missing or wrong token: send Authorization: Bearer TOKEN")
	}
	got := sha256.Sum256([]byte(token))
	if s.cfg.Token != "" && subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1 {
		return principal{login: "token", role: store.RoleAdmin}, nil
	}
	if !s.cfg.APITokens {
		return principal{}, httperr.New(httperr.Unauthenticated, "missing or wrong token: send Authorization: Bearer TOKEN")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rv, t, err := s.cfg.Store.APITokenAuthenticate(ctx, s.cfg.Store.Pool, got[:])
	var expired *store.TokenExpiredError
	switch {
	case errors.As(err, &expired):
		return principal{}, httperr.Errorf(httperr.Unauthenticated, "API token %d expired at %s; make a new one (triage admin token create)",
			expired.TokenID, expired.ExpiredAt.UTC().Format(time.RFC3339))
	case errors.Is(err, store.ErrNotFound):
		return principal{}, httperr.New(httperr.Unauthenticated, "missing or wrong token: send Authorization: Bearer TOKEN")
	case err != nil:
		return principal{}, &httperr.Error{Code: httperr.Unavailable, Message: "cannot check the token (is Postgres down?); try again later",
			Err: fmt.Errorf("authenticating a token: %w", err)}
	}
	return principal{login: rv.Login, role: t.Role, token: &t}, nil
}
