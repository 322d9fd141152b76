package triage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"

	"github.com/extractq/extractq/store"
)

// Who is asking, and how.
//
// Pages use a session cookie (HttpOnly, Secure, SameSite=Lax; the
// session row lives in Postgres) holding the reviewer's id and a CSRF
// token. Every POST made with a session must carry that token, in the
// form field csrf_token or the header X-CSRF-Token, and must not come
// from another origin (Sec-Fetch-Site, Origin, or when there is no Origin
// the Referer). The JSON API also takes
// "Authorization: Bearer <token>" for tools; such requests carry no
// cookie and need no CSRF token. With LocalOnly, every request acts as
// the reviewer "local", still with a session and CSRF token.

// LocalReviewer is who acts when the server runs without accounts.
// It is an admin: whoever reaches a server on loopback without accounts
// runs it.
var LocalReviewer = store.Reviewer{Login: "local", Name: "local (no accounts configured)", Role: store.RoleAdmin}

// Session keys.
const (
	sessReviewer = "reviewer_id"
	sessAuthGen  = "auth_generation" // the account's AuthGeneration at login
	sessCSRF     = "csrf"
	sessFlash    = "flash"
	sessFlashErr = "flash_err"
)

type ctxKey int

const (
	ctxReviewer ctxKey = iota
	ctxVia
	ctxToken // the *store.APIToken of a request made with one
)

// reviewerFrom returns the reviewer of an authenticated request.
func reviewerFrom(ctx context.Context) *store.Reviewer {
	r, _ := ctx.Value(ctxReviewer).(*store.Reviewer)
	return r
}

// viaFrom returns store.ViaUI or store.ViaAPI.
func viaFrom(ctx context.Context) string {
	v, _ := ctx.Value(ctxVia).(string)
	if v == "" {
		return store.ViaUI
	}
	return v
}

// HashPassword returns the bcrypt hash of password at cost (0 means
// bcrypt.DefaultCost). A password that CheckPassword refuses, given
// userInputs (the account's login and name), is refused with its error.
func HashPassword(password string, cost int, userInputs ...string) (string, error) {
	if err := CheckPassword(password, userInputs...); err != nil {
		return "", err
	}
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		return "", fmt.Errorf("password: %w", err)
	}
	return string(h), nil
}

// dummyHashes holds the hashes dummyHash made, by cost.
var dummyHashes sync.Map // int → []byte

// dummyHash returns a bcrypt hash at cost, made once per process and
// cost, that a login that names no account is checked against, so a
// failed login takes as long whether or not the account exists.
func dummyHash(cost int) []byte {
	if h, ok := dummyHashes.Load(cost); ok {
		return h.([]byte)
	}
	h, err := bcrypt.GenerateFromPassword([]byte("no such account, no such password"), cost)
	if err != nil { // a cost out of bcrypt's range: validate refused it
		panic(fmt.Sprintf("triage: dummy hash at cost %d: %v", cost, err))
	}
	h2, _ := dummyHashes.LoadOrStore(cost, h)
	return h2.([]byte)
}

// APITokenPrefix starts every API token.
const APITokenPrefix = "eqt_"

// NewAPIToken returns a new random API token (256 bits) and the SHA-256
// hash the store keeps.
func NewAPIToken() (token string, hash []byte) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails
	token = APITokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(token))
	return token, h[:]
}

// hashToken returns the stored hash of token.
func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// csrfToken returns the session's CSRF token, making one if needed.
func (s *Server) csrfToken(ctx context.Context) string {
	t := s.sessions.GetString(ctx, sessCSRF)
	if t == "" {
		t = randomToken()
		s.sessions.Put(ctx, sessCSRF, t)
	}
	return t
}

// checkCSRF refuses a state-changing request made with a session unless
// it carries the session's token and comes from this origin.
func (s *Server) checkCSRF(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return fmt.Errorf("%w: cross-site request", ErrForbidden)
	}
	own := s.ownOrigin(r)
	switch o := r.Header.Get("Origin"); o {
	case "":
		// No origin to go by (an older browser, a tool): the Referer,
		// when sent, must be a page of this origin. Without either, the
		// CSRF token guards.
		if ref := r.Header.Get("Referer"); ref != "" {
			if ro, ok := originOf(ref); !ok || ro != own {
				return fmt.Errorf("%w: request from a page of another origin (Referer)%s", ErrForbidden, s.originHint(ro, own))
			}
		}
	case "null":
		// An opaque origin (a sandboxed frame, a file: page, a
		// cross-origin redirect) is never this server's own pages.
		return fmt.Errorf("%w: request from an opaque origin (Origin: null), not a page of %s", ErrForbidden, own)
	default:
		if oo, ok := originOf(o); !ok || oo != own {
			return fmt.Errorf("%w: request from another origin%s", ErrForbidden, s.originHint(oo, own))
		}
	}
	want := s.sessions.GetString(r.Context(), sessCSRF)
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		// The form is read within the route's body limit (limitBody); a
		// form cut at the limit is refused as too large, other errors of
		// the form leave the token missing.
		var mbe *http.MaxBytesError
		if err := r.ParseForm(); errors.As(err, &mbe) {
			return tooLarge(r, mbe.Limit)
		}
		got = r.PostForm.Get("csrf_token")
	}
	if want == "" || got == "" || subtle.ConstantTimeCompare([]byte(want), []byte(got)) != 1 {
		return fmt.Errorf("%w: missing or stale CSRF token; reload the page", ErrForbidden)
	}
	return nil
}

// originHint says, when a refused origin differs from the server's own
// by its scheme only and no PublicURL is set, that the server may be
// behind a TLS proxy.
func (s *Server) originHint(got, own origin) string {
	if s.publicOrigin != nil || got.host != own.host || got.scheme == own.scheme {
		return ""
	}
	return fmt.Sprintf(" (%s, not %s; behind a TLS proxy, start triage with -public-url %s)", got, own, got)
}

// sessionReviewer returns the reviewer logged in on the request's
// session, or nil. A disabled or deleted account ends the session, and so
// does a password change or a disabling since the login (the account's
// AuthGeneration is no longer the one the session logged in under).
func (s *Server) sessionReviewer(r *http.Request) (*store.Reviewer, error) {
	if s.localOnly() {
		rv := LocalReviewer
		return &rv, nil
	}
	ctx := r.Context()
	id := s.sessions.GetInt64(ctx, sessReviewer)
	if id == 0 {
		return nil, nil
	}
	rv, err := s.st.ReviewerGetByID(ctx, s.st.Pool, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (rv.Disabled() || rv.AuthGeneration != s.sessions.GetInt64(ctx, sessAuthGen))) {
		_ = s.sessions.Destroy(ctx)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rv, nil
}

// bearerReviewer authenticates an "Authorization: Bearer" API token. ok
// is false when the request has no such header. A token past its expiry
// is refused (401) with when it expired and what to do.
func (s *Server) bearerReviewer(r *http.Request) (rv *store.Reviewer, tok *store.APIToken, ok bool, err error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, nil, false, nil
	}
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(token, APITokenPrefix) {
		return nil, nil, true, fmt.Errorf("%w: want Authorization: Bearer %s<token>", ErrUnauthenticated, APITokenPrefix)
	}
	got, t, err := s.st.APITokenAuthenticate(r.Context(), s.st.Pool, hashToken(strings.TrimSpace(token)))
	var expired *store.TokenExpiredError
	switch {
	case errors.As(err, &expired):
		return nil, nil, true, fmt.Errorf("%w: API token %d expired at %s; make a new one (triage admin token create)",
			ErrUnauthenticated, expired.TokenID, expired.ExpiredAt.UTC().Format(time.RFC3339))
	case errors.Is(err, store.ErrNotFound):
		return nil, nil, true, fmt.Errorf("%w: unknown or revoked token", ErrUnauthenticated)
	case err != nil:
		return nil, nil, true, err
	}
	return &got, &t, true, nil
}

// tokenFrom returns the API token a request authenticated with, or nil
// for a session.
func tokenFrom(ctx context.Context) *store.APIToken {
	t, _ := ctx.Value(ctxToken).(*store.APIToken)
	return t
}

// handlerFunc is a handler that returns its error for one place to map to
// a status.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// public wraps a page anyone may see (the login page): with a session and
// the CSRF check.
func (s *Server) public(h handlerFunc) http.Handler {
	return s.sessions.LoadAndSave(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noStore(w)
		if err := s.checkCSRF(r); err != nil {
			s.pageError(w, r, err)
			return
		}
		if err := h(w, r); err != nil {
			s.pageError(w, r, err)
		}
	}))
}

// page wraps a page for logged-in accounts of a role a admits; others
// are sent to the login page, and a role a does not admit is refused 403
// (authorize).
func (s *Server) page(a access, h handlerFunc) http.Handler {
	return s.sessions.LoadAndSave(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noStore(w)
		rv, err := s.sessionReviewer(r)
		if err != nil {
			s.pageError(w, r, err)
			return
		}
		if rv == nil {
			// A page's own fetches and streams (the queue's and an item's
			// events, the queue's live part) get 401, not a login page.
			if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/events") && r.URL.Path != "/queue/live" {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.pageError(w, r, fmt.Errorf("%w: log in again", ErrUnauthenticated))
			return
		}
		if err := s.checkCSRF(r); err != nil {
			s.pageError(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), ctxReviewer, rv)
		ctx = context.WithValue(ctx, ctxVia, store.ViaUI)
		r = r.WithContext(ctx)
		if err := s.authorize(r, a); err != nil {
			s.pageError(w, r, err)
			return
		}
		if err := h(w, r); err != nil {
			s.pageError(w, r, err)
		}
	}))
}

// api wraps a JSON API route: an API token, or a session with the CSRF
// check, of a role a admits (authorize). Errors are JSON.
func (s *Server) api(a access, h handlerFunc) http.Handler {
	run := func(w http.ResponseWriter, r *http.Request, rv *store.Reviewer, tok *store.APIToken) {
		ctx := context.WithValue(r.Context(), ctxReviewer, rv)
		ctx = context.WithValue(ctx, ctxVia, store.ViaAPI)
		if tok != nil {
			ctx = context.WithValue(ctx, ctxToken, tok)
		}
		r = r.WithContext(ctx)
		if err := s.authorize(r, a); err != nil {
			s.apiError(w, r, err)
			return
		}
		if err := h(w, r); err != nil {
			s.apiError(w, r, err)
		}
	}
	withSession := s.sessions.LoadAndSave(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rv, err := s.sessionReviewer(r)
		if err == nil && rv == nil {
			err = fmt.Errorf("%w: log in or send Authorization: Bearer <token>", ErrUnauthenticated)
		}
		if err == nil {
			err = s.checkCSRF(r)
			if err != nil && s.local.Load() && r.Header.Get("X-CSRF-Token") == "" {
				// A script's write, not a page's: there are no tokens to use
				// while serving without login.
				err = fmt.Errorf("%w: while serving without login the API's %s routes take the web page's CSRF token only; "+
					"for scripts, add a reviewer account (triage admin add-reviewer) and an API token (triage admin token create)", ErrForbidden, r.Method)
			}
		}
		if err != nil {
			s.apiError(w, r, err)
			return
		}
		run(w, r, rv, nil)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noStore(w)
		rv, tok, hasToken, err := s.bearerReviewer(r)
		switch {
		case err != nil:
			s.apiError(w, r, err)
		case hasToken:
			run(w, r, rv, tok)
		default:
			withSession.ServeHTTP(w, r)
		}
	})
}

// loginAllowed returns whether another login attempt keyed by keys is
// allowed now. When it is not, first is true if this is the first refusal
// of one of the keys within a minute: only those are audited, so a flood
// of attempts cannot flood the append-only audit log.
func (s *Server) loginAllowed(keys ...string) (ok, first bool) {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	now := s.limNow()
	if len(s.limiters) > 10000 { // forget idle keys
		for k, e := range s.limiters {
			if now.Sub(e.seen) > 10*time.Minute {
				delete(s.limiters, k)
			}
		}
	}
	ok = true
	for _, k := range keys {
		e := s.limiters[k]
		if e == nil {
			per := time.Minute / time.Duration(s.cfg.LoginsPerMinute)
			e = &limiterEntry{lim: rate.NewLimiter(rate.Every(per), s.cfg.LoginsPerMinute)}
			s.limiters[k] = e
		}
		e.seen = now
		if !e.lim.AllowN(now, 1) {
			ok = false
			if now.Sub(e.refusalAudited) >= time.Minute {
				e.refusalAudited, first = now, true
			}
		}
	}
	return ok, first
}

// Why a login failed, as the audit log says (audit_log.reason of a
// login_failed entry).
const (
	loginFailedUnknown  = "unknown account"
	loginFailedPassword = "wrong password"
	loginFailedDisabled = "account disabled"
	loginFailedThrottle = "too many attempts"
	loginFailedLocal    = "serving without login: no account may log in"
)

// auditLoginFailed records a failed login: the login tried (when it is
// not a valid login, actor says so and after holds it quoted, so that
// no control or bidi character reaches a page), why, and the client's
// address. The password is never recorded.
func (s *Server) auditLoginFailed(ctx context.Context, login, reason, remote string) error {
	actor, after := login, map[string]any{"remote": remote}
	if !store.ValidLogin(login) {
		actor, after["login"] = "(not a login)", quoteValue(login)
	}
	return s.st.AuditInsert(ctx, s.st.Pool, store.AuditInsertParams{Actor: actor, Via: store.ViaUI,
		Action: store.AuditLoginFailed, Reason: reason, After: after})
}

type loginData struct {
	Next  string
	Login string
	Error string
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) error {
	if rv, _ := s.sessionReviewer(r); rv != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return nil
	}
	return s.render(w, r, http.StatusOK, "login", "Log in", loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	login := strings.ToLower(strings.TrimSpace(r.PostFormValue("login")))
	password := r.PostFormValue("password")
	next := safeNext(r.PostFormValue("next"))
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	if ok, first := s.loginAllowed("login:"+login, "addr:"+host); !ok {
		if first {
			s.log.Warn("login attempts limited", zap.String("login", login), zap.String("remote", host))
			if err := s.auditLoginFailed(ctx, login, loginFailedThrottle, host); err != nil {
				return err
			}
		}
		return s.render(w, r, http.StatusTooManyRequests, "login", "Log in",
			loginData{Next: next, Login: login, Error: "Too many attempts; wait a minute."})
	}
	// A login that is not text (whyNotText) is no account's; Postgres
	// would refuse to look it up.
	var rv store.Reviewer
	err := fmt.Errorf("login %s: %w", quoteValue(login), store.ErrNotFound)
	if whyNotText(login) == "" {
		rv, err = s.st.ReviewerGetByLogin(ctx, s.st.Pool, login)
	}
	hash := s.dummyHash
	if err == nil {
		hash = []byte(rv.PasswordHash)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	cmpErr := bcrypt.CompareHashAndPassword(hash, []byte(password))
	if err != nil || cmpErr != nil || rv.Disabled() || s.localOnly() {
		why := loginFailedPassword
		switch {
		case s.localOnly():
			why = loginFailedLocal
		case err != nil:
			why = loginFailedUnknown
		case cmpErr != nil:
		case rv.Disabled():
			why = loginFailedDisabled
		}
		s.log.Info("login failed", zap.String("login", login), zap.String("remote", host), zap.String("reason", why))
		if err := s.auditLoginFailed(ctx, login, why, host); err != nil {
			return err
		}
		// The page says the same whatever the reason, so it tells no one
		// which logins exist.
		return s.render(w, r, http.StatusUnauthorized, "login", "Log in",
			loginData{Next: next, Login: login, Error: "Wrong login or password."})
	}
	// A new session token at login, so a token planted before cannot ride
	// the new session; a new CSRF token with it.
	if err := s.sessions.RenewToken(ctx); err != nil {
		return err
	}
	s.sessions.Put(ctx, sessReviewer, rv.ID)
	s.sessions.Put(ctx, sessAuthGen, rv.AuthGeneration)
	s.sessions.Put(ctx, sessCSRF, randomToken())
	if err := s.st.AuditInsert(ctx, s.st.Pool, store.AuditInsertParams{Actor: rv.Login, Via: store.ViaUI, Action: store.AuditLogin}); err != nil {
		return err
	}
	s.log.Info("login", zap.String("login", rv.Login))
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	rv := reviewerFrom(ctx)
	if err := s.st.AuditInsert(ctx, s.st.Pool, store.AuditInsertParams{Actor: rv.Login, Via: store.ViaUI, Action: store.AuditLogout}); err != nil {
		return err
	}
	if err := s.sessions.Destroy(ctx); err != nil {
		return err
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// maxNextLen bounds the page a login returns to (the next parameter).
const maxNextLen = 2048

// safeNext returns next if it is a path of this site, with an optional
// query, else "/". The rule keeps the login from sending a reviewer to
// another site (an open redirect): next must start with one '/' (two, or
// a '/' and a '\', would name another host), and may hold only
// printable ASCII without a backslash or '#', since browsers drop TAB, LF
// and CR anywhere in a URL ("/\t/evil.example" becomes
// "//evil.example"), trim spaces and controls at its ends, and read '\'
// as '/' (WHATWG URL Standard, "basic URL parser"). Percent-encoded bytes
// stay as they are: a browser does not decode them in a Location path, so
// "/%09/evil.example" is a path of this site. What is left must parse
// (net/url) as a path without scheme, host or user.
func safeNext(next string) string {
	if next == "" || len(next) > maxNextLen || next[0] != '/' || strings.HasPrefix(next, "//") {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c <= ' ' || c >= 0x7f || c == '\\' || c == '#' {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.EscapedPath(), "/") || strings.HasPrefix(u.EscapedPath(), "//") {
		return "/"
	}
	return next
}

// setFlash leaves a one-line message for the next page.
func (s *Server) setFlash(ctx context.Context, msg string, isErr bool) {
	s.sessions.Put(ctx, sessFlash, msg)
	s.sessions.Put(ctx, sessFlashErr, isErr)
}
