package triage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/alexedwards/scs/pgxstore"
	"github.com/alexedwards/scs/v2"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// SchemaEntry is one schema the server edits and validates records with:
// the current version, as the worker uses it.
type SchemaEntry struct {
	Schema *pipeline.Schema
	// PromptVersion is the prompt the worker extracts this schema with;
	// recorded in the audit log of re-runs.
	PromptVersion string
}

// Config configures a Server. Store and Schemas are required.
type Config struct {
	Store *store.Store
	// Schemas are the schemas in use, by id, as the worker has them
	// (internal/app.LoadSchemas). Items of other schemas are shown read
	// only.
	Schemas map[string]SchemaEntry
	// Publisher publishes re-runs on the stream. Nil leaves re-runs
	// unpublished; the worker's sweeper publishes them.
	Publisher *queue.Publisher
	// Logger receives the server's logs; nil means none. Customer text is
	// never logged.
	Logger *zap.Logger
	// LocalOnly serves without accounts: every request acts as the
	// reviewer "local", and only requests whose Host is a loopback name
	// are answered (a defence against DNS rebinding). Run sets it when no
	// account exists, and then listens on a loopback address only.
	LocalOnly bool
	// InsecureCookies sends the session cookie without the Secure flag,
	// for trials over plain HTTP on a host other than localhost. Never in
	// production.
	InsecureCookies bool
	// Lease is how long a claim lasts; the item page renews it while
	// open. Default store.DefaultLease (10m).
	Lease time.Duration
	// PollInterval is how often the queue is checked for changes to push
	// to open pages. Default 2s.
	PollInterval time.Duration
	// SessionLifetime bounds a session; SessionIdle ends it after so long
	// without a request. Defaults 12h and 2h.
	SessionLifetime, SessionIdle time.Duration
	// LoginsPerMinute limits login attempts per login name and per client
	// address. Default 10.
	LoginsPerMinute int
}

func (c Config) withDefaults() Config {
	c.Lease = cmp.Or(c.Lease, store.DefaultLease)
	c.PollInterval = cmp.Or(c.PollInterval, 2*time.Second)
	c.SessionLifetime = cmp.Or(c.SessionLifetime, 12*time.Hour)
	c.SessionIdle = cmp.Or(c.SessionIdle, 2*time.Hour)
	c.LoginsPerMinute = cmp.Or(c.LoginsPerMinute, 10)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("triage.Config: Store is required")
	case len(c.Schemas) == 0:
		return errors.New("triage.Config: Schemas is required")
	}
	for id, e := range c.Schemas {
		if e.Schema == nil {
			return fmt.Errorf("triage.Config: Schemas[%q] has no schema", id)
		}
	}
	return nil
}

// Server is the triage web UI and JSON API. Make one with New, register
// its routes with Install or take the whole Handler, and call Close when
// done.
type Server struct {
	cfg      Config
	st       *store.Store
	log      *zap.Logger
	sessions *scs.SessionManager
	pages    map[string]*template.Template
	docs     map[string]schemaNode // schema documents by id, for the editor
	hub      *hub

	limMu    sync.Mutex
	limiters map[string]*limiterEntry

	closeOnce sync.Once
	closing   chan struct{}
}

type limiterEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

// New returns a Server for cfg. Sessions live in Postgres (table
// sessions).
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:      cfg,
		st:       cfg.Store,
		log:      cfg.Logger.Named("triage"),
		docs:     map[string]schemaNode{},
		limiters: map[string]*limiterEntry{},
		closing:  make(chan struct{}),
	}
	for id, e := range cfg.Schemas {
		var doc schemaNode
		if err := json.Unmarshal(e.Schema.Raw, &doc); err != nil {
			return nil, fmt.Errorf("triage.New: schema %s: %w", id, err)
		}
		s.docs[id] = doc
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("triage.New: %w", err)
	}
	s.pages = pages

	sm := scs.New()
	// No cleanup goroutine of pgxstore's: the server's own (cleanSessions)
	// stops with Close.
	sm.Store = pgxstore.NewWithCleanupInterval(cfg.Store.Pool, 0)
	sm.Lifetime = cfg.SessionLifetime
	sm.IdleTimeout = cfg.SessionIdle
	sm.HashTokenInStore = true
	sm.Cookie.Name = "extractq_triage"
	sm.Cookie.HttpOnly = true
	sm.Cookie.SameSite = http.SameSiteLaxMode
	sm.Cookie.Secure = !cfg.InsecureCookies
	sm.Cookie.Persist = false
	sm.ErrorFunc = func(w http.ResponseWriter, r *http.Request, err error) {
		s.log.Error("session store", zap.Error(err))
		http.Error(w, "session store unavailable", http.StatusInternalServerError)
	}
	s.sessions = sm
	s.hub = newHub(cfg.Store, cfg.PollInterval, s.log, s.closing)
	go s.cleanSessions(10 * time.Minute)
	return s, nil
}

// cleanSessions deletes expired sessions every interval until Close.
func (s *Server) cleanSessions(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			n, err := s.st.SessionDeleteExpired(ctx, s.st.Pool)
			cancel()
			if err != nil {
				s.log.Warn("deleting expired sessions", zap.Error(err))
			} else if n > 0 {
				s.log.Debug("expired sessions deleted", zap.Int64("sessions", n))
			}
		}
	}
}

// Close stops the live-update streams and the session cleanup. The store
// is the caller's to close.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// Handler returns every route behind the security headers (and, with
// LocalOnly, the loopback host check).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.Install(mux)
	var h http.Handler = mux
	if s.cfg.LocalOnly {
		h = loopbackOnly(h)
	}
	return securityHeaders(h)
}

// Install registers the triage routes on mux, with Go 1.22 method
// patterns. Pages need a session; the JSON API under /api/v1/ takes a
// session or an API token. Every state-changing request made with a
// session must carry the session's CSRF token.
func (s *Server) Install(mux *http.ServeMux) {
	// Public.
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /login", s.public(s.loginPage))
	mux.Handle("POST /login", s.public(s.login))
	mux.Handle("POST /logout", s.page(s.logout))

	// Pages.
	mux.Handle("GET /{$}", s.page(s.queuePage))
	mux.Handle("GET /queue/live", s.page(s.queueLive))
	mux.Handle("GET /events", s.page(s.events))
	mux.Handle("POST /claim-next", s.page(s.claimNextPage))
	mux.Handle("GET /items/{id}", s.page(s.itemPage))
	mux.Handle("POST /items/{id}/claim", s.page(s.claimPage))
	mux.Handle("POST /items/{id}/release", s.page(s.releasePage))
	mux.Handle("POST /items/{id}/check", s.page(s.checkPage))
	mux.Handle("POST /items/{id}/approve", s.page(s.approvePage))
	mux.Handle("POST /items/{id}/reject", s.page(s.rejectPage))
	mux.Handle("POST /items/{id}/rerun", s.page(s.rerunPage))
	mux.Handle("GET /rerun", s.page(s.bulkRerunPage))
	mux.Handle("POST /rerun", s.page(s.bulkRerunPost))
	mux.Handle("GET /audit", s.page(s.auditPage))

	// JSON API.
	mux.Handle("GET /api/v1/me", s.api(s.apiMe))
	mux.Handle("GET /api/v1/items", s.api(s.apiItems))
	mux.Handle("GET /api/v1/items/counts", s.api(s.apiCounts))
	mux.Handle("POST /api/v1/items/claim-next", s.api(s.apiClaimNext))
	mux.Handle("GET /api/v1/items/{id}", s.api(s.apiItem))
	mux.Handle("POST /api/v1/items/{id}/claim", s.api(s.apiClaim))
	mux.Handle("POST /api/v1/items/{id}/release", s.api(s.apiRelease))
	mux.Handle("POST /api/v1/items/{id}/validate", s.api(s.apiValidate))
	mux.Handle("POST /api/v1/items/{id}/approve", s.api(s.apiApprove))
	mux.Handle("POST /api/v1/items/{id}/reject", s.api(s.apiReject))
	mux.Handle("POST /api/v1/items/{id}/rerun", s.api(s.apiRerun))
	mux.Handle("GET /api/v1/rerun/count", s.api(s.apiBulkCount))
	mux.Handle("POST /api/v1/rerun", s.api(s.apiBulkRerun))
	mux.Handle("GET /api/v1/messages/{id}/result", s.api(s.apiResult))
	mux.Handle("GET /api/v1/audit", s.api(s.apiAudit))
	mux.Handle("/api/", s.api(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no API route %s %s", ErrNotFound, r.Method, r.URL.Path)
	}))
	mux.Handle("/", s.public(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no page %s", ErrNotFound, r.URL.Path)
	}))
}

// schemaIDs returns the configured schema ids, sorted.
func (s *Server) schemaIDs() []string {
	out := make([]string, 0, len(s.cfg.Schemas))
	for id := range s.cfg.Schemas {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Serve serves h on ln until ctx ends, then shuts down within 10s,
// calling onShutdown (which should end long-lived streams; may be nil).
// The server's timeouts bound slow clients; the live-update stream sets
// its own write deadlines.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, onShutdown func(), log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log),
	}
	if onShutdown != nil {
		srv.RegisterOnShutdown(onShutdown)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("triage: shutdown: %w", err)
	}
	return nil
}

// Run serves the triage UI and API on addr until ctx ends. When no
// reviewer account exists it serves without login, as the reviewer
// "local", on a loopback address only: a non-loopback addr is replaced by
// 127.0.0.1 with the same port, and requests must name a loopback host.
func Run(ctx context.Context, addr string, cfg Config) error {
	if cfg.Store == nil {
		return errors.New("triage.Run: Store is required")
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	n, err := cfg.Store.ReviewerCount(ctx, cfg.Store.Pool)
	if err != nil {
		return fmt.Errorf("triage.Run: %w", err)
	}
	if n == 0 {
		cfg.LocalOnly = true
		if la := loopbackAddr(addr); la != addr {
			log.Warn("no reviewer accounts: listening on localhost only; create one with `triage admin add-reviewer`",
				zap.String("asked", addr), zap.String("addr", la))
			addr = la
		}
	}
	s, err := New(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("triage.Run: %w", err)
	}
	log.Info("triage listening", zap.String("addr", ln.Addr().String()), zap.Bool("local_only", cfg.LocalOnly),
		zap.Int("reviewers", n), zap.Bool("publisher", cfg.Publisher != nil), zap.Strings("schemas", s.schemaIDs()))
	return Serve(ctx, ln, s.Handler(), s.Close, log)
}

// loopbackAddr returns addr with its host replaced by 127.0.0.1 unless it
// already is a loopback name.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "127.0.0.1:8080"
	}
	if host != "" && isLoopbackHost(host) {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}
