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
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alexedwards/scs/pgxstore"
	"github.com/alexedwards/scs/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/relay"
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
	// (worker.LoadSchemas). Items of other schemas are shown read
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
	// account exists, and then listens on a loopback address only. Once
	// an account exists (checked every LocalCheckEvery), it ends: from
	// then on every request needs a login or a token.
	LocalOnly bool
	// LocalCheckEvery is how often a LocalOnly server looks for a
	// reviewer account. Default 5s.
	LocalCheckEvery time.Duration
	// PublicURL is the origin reviewers open the server at, such as
	// "https://triage.example.com": needed when it is not the one the
	// server sees, as behind a TLS-terminating proxy, where the server
	// sees plain HTTP. When set, a POST made with a session must come
	// from exactly this scheme, host and port (Origin, or Referer), and
	// HSTS is sent when it is https. Empty means the request's own
	// origin: https when the request came over TLS, else http, with the
	// request's Host. A client's X-Forwarded-Proto is not trusted.
	PublicURL string
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
	// UndoWindow is how long after a decision its reviewer may undo it
	// (reopen the item). Default 10m.
	UndoWindow time.Duration
	// Registry, when set, gets the server's metrics (requests by route,
	// decisions, open items); the caller serves it.
	Registry *prometheus.Registry
	// Events, when set, makes item pages live across replicas (live.go):
	// each decision is published on it, after its commit, on
	// queue.TriageItemSubject of EventsNATS (its SubjectPrefix), and each
	// open item page hears its item's events from every replica. Nil:
	// item pages are not live.
	Events     *nats.Conn
	EventsNATS config.NATS
	// BcryptCost is the bcrypt cost of the hash a login that names no
	// account is checked against, so that it takes as long as one that
	// names an account: the cost of the accounts' hashes. Default
	// bcrypt.DefaultCost (10), the admin command's (AdminIO.BcryptCost).
	BcryptCost int
}

func (c Config) withDefaults() Config {
	c.Lease = cmp.Or(c.Lease, store.DefaultLease)
	c.BcryptCost = cmp.Or(c.BcryptCost, bcrypt.DefaultCost)
	c.PollInterval = cmp.Or(c.PollInterval, 2*time.Second)
	c.SessionLifetime = cmp.Or(c.SessionLifetime, 12*time.Hour)
	c.SessionIdle = cmp.Or(c.SessionIdle, 2*time.Hour)
	c.LoginsPerMinute = cmp.Or(c.LoginsPerMinute, 10)
	c.LocalCheckEvery = cmp.Or(c.LocalCheckEvery, 5*time.Second)
	c.UndoWindow = cmp.Or(c.UndoWindow, 10*time.Minute)
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
	if c.BcryptCost != 0 && (c.BcryptCost < bcrypt.MinCost || c.BcryptCost > bcrypt.MaxCost) {
		return fmt.Errorf("triage.Config: BcryptCost %d: want %d to %d, or 0 for the default", c.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if c.PublicURL != "" {
		if _, err := parsePublicURL(c.PublicURL); err != nil {
			return fmt.Errorf("triage.Config: PublicURL: %w", err)
		}
	}
	return nil
}

// parsePublicURL returns the origin of Config.PublicURL: an http or https
// URL with a host and nothing after it but an optional "/".
func parsePublicURL(raw string) (origin, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return origin{}, fmt.Errorf("%q: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return origin{}, fmt.Errorf("%q: want an http:// or https:// URL, such as https://triage.example.com", raw)
	case u.Host == "" || u.User != nil:
		return origin{}, fmt.Errorf("%q: want a host and no user, such as https://triage.example.com", raw)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return origin{}, fmt.Errorf("%q: want only a scheme and host (and port), such as https://triage.example.com: the server serves at /", raw)
	}
	o, _ := originOf(raw)
	return o, nil
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
	metrics  *metrics     // nil without Config.Registry
	relay    *relay.Relay // publishes re-runs; nil without Config.Publisher
	live     *itemLive    // item events; nil without Config.Events

	publicOrigin *origin // Config.PublicURL's; nil without it

	limMu    sync.Mutex
	limiters map[string]*limiterEntry
	limNow   func() time.Time // the login limiter's clock: time.Now; tests set their own (SetLoginClock)

	dummyHash []byte // compared against for a login that names no account; at Config.BcryptCost

	closeOnce sync.Once
	closing   chan struct{}

	// local is true while the server serves without accounts
	// (Config.LocalOnly, until an account exists); localEnded is closed
	// when that ends, to end the live streams opened without login.
	local      atomic.Bool
	localEnded chan struct{}
}

// localOnly reports whether requests act as LocalReviewer, without login.
func (s *Server) localOnly() bool { return s.local.Load() }

// watchAccounts ends local mode once a reviewer account exists, checking
// every interval until Close.
func (s *Server) watchAccounts(interval time.Duration) {
	s.every(interval, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := s.st.ReviewerCount(ctx, s.st.Pool)
		cancel()
		if err != nil {
			s.log.Warn("looking for reviewer accounts", zap.Error(err))
			return false
		}
		if n == 0 {
			return false
		}
		s.local.Store(false)
		close(s.localEnded)
		s.log.Warn("a reviewer account exists: serving without login has ended; every request now needs a login or a token",
			zap.Int("reviewers", n))
		return true
	})
}

// every calls tick every interval until Close, or until tick reports
// that it is done.
func (s *Server) every(interval time.Duration, tick func() (done bool)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			if tick() {
				return
			}
		}
	}
}

type limiterEntry struct {
	lim            *rate.Limiter
	seen           time.Time
	refusalAudited time.Time // when a refusal was last audited
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
		limNow:   time.Now,
		closing:  make(chan struct{}),

		dummyHash: dummyHash(cfg.BcryptCost),

		localEnded: make(chan struct{}),
	}
	if cfg.Registry != nil {
		s.metrics = newMetrics(cfg.Registry, cfg.Store)
	}
	if cfg.Publisher != nil {
		r, err := relay.New(relay.Config{Store: cfg.Store, Publisher: cfg.Publisher, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("triage.New: %w", err)
		}
		s.relay = r
	}
	if cfg.Events != nil {
		s.live = newItemLive(cfg.Events, cfg.EventsNATS, s.log)
	}
	if cfg.PublicURL != "" {
		o, _ := parsePublicURL(cfg.PublicURL) // checked by validate
		s.publicOrigin = &o
	}
	for id, e := range cfg.Schemas {
		var doc schemaNode
		if err := json.Unmarshal(e.Schema.Raw, &doc); err != nil {
			return nil, fmt.Errorf("triage.New: schema %s: %w", id, err)
		}
		s.docs[id] = doc
	}
	pages, err := parsedPages()
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
	if cfg.LocalOnly {
		s.local.Store(true)
		go s.watchAccounts(cfg.LocalCheckEvery)
	}
	return s, nil
}

// cleanSessions deletes expired sessions every interval until Close.
func (s *Server) cleanSessions(interval time.Duration) {
	s.every(interval, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := s.st.SessionDeleteExpired(ctx, s.st.Pool)
		cancel()
		if err != nil {
			s.log.Warn("deleting expired sessions", zap.Error(err))
		} else if n > 0 {
			s.log.Debug("expired sessions deleted", zap.Int64("sessions", n))
		}
		return false
	})
}

// Close stops the live-update streams and the session cleanup. The store
// is the caller's to close.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// Handler returns every route behind the security headers, the body
// limit of the largest route (MaxRecordBody; each route has its own as
// well, see Install) and, with LocalOnly, the loopback host check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.Install(mux)
	var h http.Handler = mux
	if s.cfg.LocalOnly {
		h = loopbackOnly(h)
	}
	return s.securityHeaders(s.limitBody(MaxRecordBody, h))
}

// Install registers the triage routes on outer, with Go 1.22 method
// patterns, each counted by the server's metrics when it has a Registry. Pages need a session; the JSON API under /api/v1/ takes a
// session or an API token, and refuses query parameters a route does not
// take. Every state-changing request made with a session must carry the
// session's CSRF token. Every route caps its request body before anything
// reads it (limitBody): MaxRecordBody for the routes that take the
// editor's record, MaxLoginBody for the login, MaxBody for the others; a
// multipart body is refused everywhere.
func (s *Server) Install(outer *http.ServeMux) {
	mux := instrumentedMux{outer, s}
	// Public.
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", ReadyHandler(s.cfg.Store))
	mux.Handle("GET /login", s.public(s.loginPage))
	mux.handleLimit("POST /login", MaxLoginBody, s.public(s.login))
	mux.Handle("POST /logout", s.page(anyAccount, s.logout))

	// Pages, each with the roles it admits (docs/triage.md, "Roles").
	mux.Handle("GET /{$}", s.page(anyAccount, s.homePage))
	mux.Handle("GET /queue/live", s.page(reviewers, s.queueLive))
	mux.Handle("GET /events", s.page(reviewers, s.events))
	mux.Handle("POST /claim-next", s.page(reviewers, s.claimNextPage))
	mux.Handle("GET /items/{id}", s.page(reviewers, s.itemPage))
	mux.Handle("GET /items/{id}/events", s.page(reviewers, s.itemEvents))
	mux.Handle("POST /items/{id}/claim", s.page(reviewers, s.claimPage))
	mux.Handle("POST /items/{id}/release", s.page(reviewers, s.releasePage))
	mux.handleLimit("POST /items/{id}/check", MaxRecordBody, s.page(reviewers, s.checkPage))
	mux.handleLimit("POST /items/{id}/approve", MaxRecordBody, s.page(reviewers, s.approvePage))
	mux.Handle("POST /items/{id}/reject", s.page(reviewers, s.rejectPage))
	mux.Handle("POST /items/{id}/rerun", s.page(reviewers, s.rerunPage))
	mux.Handle("POST /items/{id}/reopen", s.page(reviewers, s.reopenPage))
	mux.Handle("POST /items/bulk", s.page(reviewers, s.bulkPage(bulkApprove, bulkReject)))
	mux.Handle("POST /items/bulk-rerun", s.page(admins, s.bulkPage(bulkRerun)))
	mux.Handle("GET /rerun", s.page(admins, s.bulkRerunPage))
	mux.Handle("POST /rerun", s.page(admins, s.bulkRerunPost))
	mux.Handle("GET /audit", s.page(admins, s.auditPage))
	mux.Handle("GET /reports", s.page(anyAccount, s.reportsPage))
	mux.Handle("GET /qa", s.page(reviewers, s.qaPage))
	mux.Handle("POST /qa/claim-next", s.page(reviewers, s.qaClaimNextPage))
	mux.Handle("GET /qa/{id}", s.page(reviewers, s.qaItemPage))
	mux.handleLimit("POST /qa/{id}", MaxRecordBody, s.page(reviewers, s.qaReviewPage))

	// JSON API. Each route takes the query parameters named here and
	// refuses others (takes), and admits the roles named.
	api := func(pattern string, a access, params []string, h handlerFunc) {
		mux.Handle(pattern, s.api(a, takes(params, h)))
	}
	apiRecord := func(pattern string, a access, params []string, h handlerFunc) {
		mux.handleLimit(pattern, MaxRecordBody, s.api(a, takes(params, h)))
	}
	api("GET /api/v1/me", anyToken, nil, s.apiMe)
	api("GET /api/v1/items", reviewers, itemsParams, s.apiItems)
	api("GET /api/v1/items/counts", anyAccount, filterParams, s.apiCounts)
	api("POST /api/v1/items/claim-next", reviewers, claimNextParams, s.apiClaimNext)
	api("GET /api/v1/items/{id}", reviewers, nil, s.apiItem)
	api("POST /api/v1/items/{id}/claim", reviewers, nil, s.apiClaim)
	api("POST /api/v1/items/{id}/release", reviewers, nil, s.apiRelease)
	apiRecord("POST /api/v1/items/{id}/validate", reviewers, nil, s.apiValidate)
	apiRecord("POST /api/v1/items/{id}/approve", reviewers, nil, s.apiApprove)
	api("POST /api/v1/items/{id}/reject", reviewers, nil, s.apiReject)
	api("POST /api/v1/items/{id}/rerun", reviewers, nil, s.apiRerun)
	api("POST /api/v1/items/bulk", reviewers, nil, s.apiBulk(bulkApprove, bulkReject))
	api("POST /api/v1/items/bulk-rerun", admins, nil, s.apiBulk(bulkRerun))
	api("GET /api/v1/rerun/count", admins, filterParams, s.apiBulkCount)
	api("POST /api/v1/rerun", admins, filterParams, s.apiBulkRerun)
	api("GET /api/v1/messages/{id}/result", reviewers, resultParams, s.apiResult)
	api("GET /api/v1/audit", admins, auditParams, s.apiAudit)
	api("GET /api/v1/reports/failing-fields", anyAccount, reportFieldParams, s.apiFailingFields)
	api("GET /api/v1/reports/repair", anyAccount, reportFieldParams, s.apiRepairEffect)
	api("GET /api/v1/reports/qa", anyAccount, []string{"schema"}, s.apiQAEstimates)
	api("POST /api/v1/qa/claim-next", reviewers, []string{"schema"}, s.apiQAClaimNext)
	api("GET /api/v1/qa/{id}", reviewers, nil, s.apiQASample)
	apiRecord("POST /api/v1/qa/{id}/review", reviewers, nil, s.apiQAReview)
	api("GET /api/v1/batches", anyAccount, batchListParams, s.apiBatches)
	api("GET /api/v1/batches/{id}", anyAccount, nil, s.apiBatch)
	mux.Handle("/api/", s.api(anyToken, func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no API route %s %s", ErrNotFound, r.Method, r.URL.Path)
	}))
	mux.Handle("/", s.public(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no page %s", ErrNotFound, r.URL.Path)
	}))
}

// instrumentedMux registers handlers on a ServeMux, each counted and
// timed under its pattern (metrics.instrument) and with its body limit
// (limitBody; MaxBody unless handleLimit says otherwise).
type instrumentedMux struct {
	*http.ServeMux
	s *Server
}

func (im instrumentedMux) Handle(pattern string, h http.Handler) {
	im.handleLimit(pattern, MaxBody, h)
}

func (im instrumentedMux) handleLimit(pattern string, limit int64, h http.Handler) {
	im.ServeMux.Handle(pattern, im.s.metrics.instrument(pattern, im.s.limitBody(limit, h)))
}

func (im instrumentedMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	im.Handle(pattern, http.HandlerFunc(h))
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
			log.Warn("no enabled accounts: listening on localhost only; create one with `triage admin add-reviewer`, or enable one with `triage admin enable`",
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
		zap.Int("reviewers", n), zap.Bool("publisher", cfg.Publisher != nil), zap.Strings("schemas", s.schemaIDs()),
		zap.String("public_url", cfg.PublicURL))
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
