// Package ingestapi is the HTTP API of `ingest serve`, the HTTP way in:
// POST /v1/messages takes a body of messages, runs it through an
// ingest.Ingester as one new batch, exactly as a file, and answers with
// the ingest.Report that `ingest -json` prints. GET /v1/batches/{id} says
// where a batch stands, and waits for it to be done with wait=D; GET
// /v1/batches/{id}/results streams its messages' results as JSONL. POST
// /v1/erasures erases the text of the messages a customer asked to have
// erased. POST /v1/webhooks/{name} takes another system's JSON, signed or
// with a token, as one message (webhooks.go, package webhook). GET /healthz answers while the process is up, GET /readyz while
// Postgres and NATS are reachable. Errors are {"error": {"code",
// "message"}}, of the product's one error table (internal/httperr,
// docs/http-errors.md); a 422, and a 503 that stopped part way, carry the
// report's fields beside it. Handlers return their errors (handlerFunc);
// one place, serveError, answers them. Before any route: a request from a web page of another
// origin is 403, and, without a token, one whose Host is not a loopback
// name 421.
//
// Each route has its file: messages.go, webhooks.go, batches.go,
// results.go, erasures.go, health.go; server.go holds the Server, its routing, the
// gates every request passes and the reading shared by the routes.
package ingestapi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/extractq/extractq/export"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/internal/httpguard"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// Defaults of ServerConfig.
const (
	// DefaultMaxBodyBytes is the largest request body taken, in bytes
	// (32 MiB).
	DefaultMaxBodyBytes = 32 << 20
	// DefaultServeParallel is how many lines of one request are recorded
	// and published at once.
	DefaultServeParallel = 4
	// DefaultMaxRequests is how many POSTs carrying messages (POST
	// /v1/messages and the webhooks together) are handled at once.
	DefaultMaxRequests = 4
	// DefaultBusyWait is how long a request waits for one of MaxRequests
	// before it is answered 429.
	DefaultBusyWait = 5 * time.Second
	// DefaultRequestTimeout bounds one request, from its headers to its
	// answer.
	DefaultRequestTimeout = 5 * time.Minute
)

// retryAfter is the Retry-After of 503 answers, in seconds.
const retryAfter = 5

// Content types of POST /v1/messages.
const (
	ContentTypeNDJSON = "application/x-ndjson"
	ContentTypeJSONL  = "application/jsonl"
	ContentTypeCSV    = "text/csv"
	ContentTypeJSON   = "application/json"
)

// supportedTypes names the content types taken, for 415 answers.
const supportedTypes = ContentTypeNDJSON + " or " + ContentTypeJSONL + " (JSONL), " + ContentTypeCSV +
	" (CSV with a header row), " + ContentTypeJSON + " (one object or an array of objects)"

// maxParamBytes bounds the batch and name parameters, in bytes.
const maxParamBytes = 200

// ServerConfig configures a Server.
type ServerConfig struct {
	Store     *store.Store
	Publisher *queue.Publisher
	// Conn is the NATS connection Publisher publishes on; /readyz, and
	// each POST before it reads its body, check that it is connected.
	Conn *nats.Conn
	// Schemas are the schema ids a request may name (parameter schema);
	// the first is the default. Required.
	Schemas []string
	// MaxTextBytes rejects longer texts (Config.MaxTextBytes). Required.
	MaxTextBytes int
	// MaxErrors is how many rejected lines an answer lists with their
	// reasons (ingest.Config.MaxErrors); the rest are counted in its
	// errors_omitted. Default ingest.DefaultMaxErrors.
	MaxErrors int
	// NATSRetryTime is how long a line's publish waits out a NATS that
	// does not take it (ingest.Config.NATSRetryTime), within
	// RequestTimeout. Default ingest.DBRetryTime.
	NATSRetryTime time.Duration
	// MaxBodyBytes is the largest body taken, in bytes; a larger one is
	// answered 413 and nothing of it is stored. Default DefaultMaxBodyBytes.
	// A body is held in memory while it is ingested, so at most
	// MaxRequests * MaxBodyBytes bytes are held at once.
	MaxBodyBytes int64
	// Token, when set, is a bearer token an API request may carry
	// (Authorization: Bearer TOKEN), acting as admin, without expiry.
	// Prefer APITokens, which carry a role and an expiry. With neither,
	// `ingest serve` listens on a loopback address only, the server
	// answers only requests whose Host names a loopback address (421
	// otherwise), and every request acts as admin.
	Token string
	// APITokens, when set, takes the API tokens of Store (triage admin
	// token create), each acting with its role and refused past its
	// expiry (auth.go). Every API request must then carry one, or Token.
	APITokens bool
	// Parallel is how many lines of one request are recorded and
	// published at once. Default DefaultServeParallel.
	Parallel int
	// MaxRequests is how many POSTs carrying messages (POST /v1/messages
	// and the webhooks together: admit) are handled at once; one more
	// waits up to BusyWait, then is answered 429. Default
	// DefaultMaxRequests.
	MaxRequests int
	// BusyWait: see MaxRequests. Default DefaultBusyWait.
	BusyWait time.Duration
	// RequestTimeout bounds one request; an ingest still running then
	// stops, and the answer is 503 with how far it got. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Registry, when set, gets the server's metrics, and GET /metrics
	// serves what it gathers (Prometheus text format, no token needed)
	// unless MetricsApart.
	Registry *prometheus.Registry
	// MetricsApart leaves GET /metrics out of the server's routes (404):
	// the caller serves Registry on a listener of its own, so that the
	// API's port does not show the metrics (cmd/ingest serve
	// -metrics-addr).
	MetricsApart bool
	// ResultColumns are the CSV columns of each schema's results
	// (export.SchemaColumns), for GET /v1/batches/{id}/results?format=csv;
	// a schema missing here is answered 422 for CSV.
	ResultColumns map[string][]export.Column
	// ResultsPage is how many messages GET /v1/batches/{id}/results reads
	// from Postgres at a time. Default 1000.
	ResultsPage int
	// Webhooks are the webhooks POST /v1/webhooks/{name} takes
	// (webhooks.go); NewServer fails naming a bad one.
	Webhooks []Webhook
	// Logger logs one line per POST: its status, batch, counts and
	// duration, never a message's text, the token or a secret.
	Logger *zap.Logger
}

// Server is the HTTP ingest server: an http.Handler, and Serve to run it.
type Server struct {
	cfg       ServerConfig
	log       *zap.Logger
	tokenHash [sha256.Size]byte
	mux       *http.ServeMux
	metrics   *serverMetrics // nil without a Registry
	hooks     map[string]*hook
	erasure   *erasure.Service
	// sem holds one token per POST being handled (MaxRequests).
	sem chan struct{}
	// stop ends the ingests still running when the shutdown grace is over.
	stop       context.Context
	stopCancel context.CancelFunc
	draining   atomic.Bool
	// gate counts the POSTs in flight; once closed, none enters.
	gateMu  sync.RWMutex
	closed  bool
	flights sync.WaitGroup
	active  atomic.Int32
	// reading counts the POSTs past the readiness check, reading their
	// body: a test that shuts down with a request in flight waits for it
	// (a request not yet past the check is refused as shutting down).
	reading atomic.Int32
}

// NewServer returns a Server. It fails when Store, Publisher, Conn,
// Schemas or MaxTextBytes is missing.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.Conn == nil || len(cfg.Schemas) == 0 || cfg.MaxTextBytes <= 0 {
		return nil, errors.New("ingest.NewServer: Store, Publisher, Conn, Schemas and MaxTextBytes are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultServeParallel
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.BusyWait <= 0 {
		cfg.BusyWait = DefaultBusyWait
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.ResultsPage <= 0 {
		cfg.ResultsPage = 1000
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	hooks, err := newHooks(cfg.Webhooks, cfg)
	if err != nil {
		return nil, fmt.Errorf("ingest.NewServer: %w", err)
	}
	s := &Server{cfg: cfg, log: log.Named("http"), sem: make(chan struct{}, cfg.MaxRequests), erasure: erasure.New(cfg.Store), hooks: hooks}
	if cfg.Token != "" {
		s.tokenHash = sha256.Sum256([]byte(cfg.Token))
	}
	s.stop, s.stopCancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	// Every route caps its body before anything reads it: a route that
	// takes none refuses one, the others read at most their limit.
	if cfg.Registry != nil {
		s.metrics = newServerMetrics(cfg.Registry)
		if !cfg.MetricsApart {
			mux.Handle("GET /metrics", s.limitBody("GET /metrics", 0, promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{})))
		}
	}
	// Each API route, instrumented, and a 405 for its other methods.
	var routes []string
	route := func(method, path string, maxBody int64, h http.Handler) {
		routes = append(routes, method+" "+path)
		mux.Handle(method+" "+path, s.limitBody(method+" "+path, maxBody, s.metrics.instrument(path, h)))
		mux.Handle(path, s.limitBody("", 0, s.handle(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", method)
			return httperr.New(httperr.MethodNotAllowed, r.Method+" "+path+": the route takes "+method)
		})))
	}
	route("POST", "/v1/messages", cfg.MaxBodyBytes, s.gated("POST /v1/messages", s.handle(s.messages)))
	route("GET", "/v1/batches/{id}", 0, s.handle(s.batch))
	route("GET", "/v1/batches/{id}/results", 0, s.handle(s.results))
	route("POST", "/v1/erasures", maxErasureBody, s.handle(s.erasures))
	route("POST", "/v1/webhooks/{name}", cfg.MaxBodyBytes, s.gated(webhookRoute, s.handle(s.webhook)))
	routes = append(routes, "GET /healthz", "GET /readyz")
	if !cfg.MetricsApart {
		routes = append(routes, "GET /metrics")
	}
	mux.Handle("GET /healthz", s.limitBody("GET /healthz", 0, s.handle(s.healthz)))
	mux.Handle("GET /readyz", s.limitBody("GET /readyz", 0, s.handle(s.readyz)))
	mux.Handle("/", s.limitBody("", 0, s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return httperr.Errorf(httperr.NotFound, "no route %s %s; the routes are %s and %s",
			r.Method, r.URL.Path, strings.Join(routes[:len(routes)-1], ", "), routes[len(routes)-1])
	})))
	s.mux = mux
	return s, nil
}

// errClientGone is a handler's error when the client went away: nothing
// is answered.
var errClientGone = errors.New("the client went away")

// handlerFunc is a route's handler: it answers, or returns the error
// that handle answers for it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle runs h and answers its error, the one place errors become
// answers (serveError).
func (s *Server) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.serveError(w, r, err)
		}
	})
}

// serveError answers err as httperr.Write does: the *httperr.Error it
// is or wraps, else 500 with a generic message, its detail logged. A
// handler sets the headers an error needs (Retry-After, Allow,
// WWW-Authenticate) before it returns the error.
func (s *Server) serveError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errClientGone) {
		return // nobody reads the answer
	}
	e, ok := httperr.As(err)
	if !ok {
		s.log.Error("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		e = httperr.Internalf(err)
	}
	httperr.Write(w, e)
}

// ServeHTTP serves the routes. Without a token it answers only requests
// whose Host names a loopback address (httpguard.IsLoopbackHost), and 421
// any other, so a page elsewhere cannot reach the server through DNS
// rebinding: its name, bound to 127.0.0.1, is still its own in Host. A
// request from a web page of another origin (crossOrigin) is 403, token
// or not.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token == "" && !s.cfg.APITokens && !httpguard.IsLoopbackHost(r.Host) {
		s.log.Warn("refused a request naming a Host that is not loopback: no token is set", zap.String("host", r.Host),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		s.serveError(w, r, httperr.Errorf(httperr.MisdirectedRequest, "Host %q: without a token this server answers only "+
			"requests to a loopback host (localhost, 127.0.0.1, [::1]); to serve other names, set a token (INGEST_TOKEN or -token-file)", r.Host))
		return
	}
	if why := crossOrigin(r); why != "" {
		s.log.Warn("refused a request from a page of another origin", zap.String("origin", r.Header.Get("Origin")),
			zap.String("sec_fetch_site", r.Header.Get("Sec-Fetch-Site")), zap.String("host", r.Host),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		s.serveError(w, r, httperr.New(httperr.CrossOrigin, why+": the API answers programs, not web pages of other origins"))
		return
	}
	// No route takes a form or a file upload (nor parses one): refused
	// before routing, so none is ever read as one.
	if mt, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Type"))), ";"); strings.HasPrefix(mt, "multipart/") {
		s.serveError(w, r, httperr.Errorf(httperr.UnsupportedMediaType, "Content-Type %q: no route takes a multipart body "+
			"(a form or file upload, as curl -F sends); POST /v1/messages takes the messages as the body itself (curl --data-binary @FILE), "+
			"as %s; POST /v1/erasures takes %s", strings.TrimSpace(mt), supportedTypes, ContentTypeJSON))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// crossOrigin says why r comes from a web page of another origin than
// this server's ("" when it does not): Sec-Fetch-Site cross-site or
// same-site; an Origin that is not this server's (httpguard.SameOrigin:
// the same scheme, host and port), "null" too (a sandboxed frame, a local
// file); or, without an Origin, a Referer that is not a page of it.
// Programs send none of these; no page is served here, and a page
// elsewhere must not ingest, read results or erase, even by a request a
// browser sends without asking (a POST of text/plain, a GET).
func crossOrigin(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return "the request comes from a page of another site (Sec-Fetch-Site: " + site + ")"
	}
	self := httpguard.RequestScheme(r) + "://" + r.Host
	if o := r.Header.Values("Origin"); len(o) > 0 {
		if len(o) > 1 || !httpguard.SameOrigin(r, o[0]) {
			return fmt.Sprintf("the request comes from a page of another origin (Origin %q, not %s)", strings.Join(o, ", "), self)
		}
		return ""
	}
	if ref := r.Header.Get("Referer"); ref != "" && !httpguard.SameOrigin(r, ref) {
		return "the request comes from a page of another origin (its Referer is not a page of " + self + ")"
	}
	return ""
}

// limitBody caps the body h reads at maxBody bytes: a read past that
// fails with *http.MaxBytesError, and the connection is closed after the
// answer. A route that takes no body (maxBody 0) answers 413 to one
// declared by Content-Length; route names it, "" for the 404 and 405
// answers, which refuse nothing. It must wrap h outside any middleware
// that wraps w, so the limit reaches the connection. h gets a shallow copy
// of r: the server keeps r's own body, to skip what h left unread (or
// close the connection when that is long) before it answers.
func (s *Server) limitBody(route string, maxBody int64, h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if maxBody == 0 && route != "" && r.ContentLength > 0 {
			s.serveError(w, r, httperr.Errorf(httperr.TooLarge, "%s takes no body; this one is %d bytes", route, r.ContentLength))
			return
		}
		capped := r.WithContext(r.Context())
		capped.Body = http.MaxBytesReader(w, r.Body, maxBody)
		h.ServeHTTP(w, capped)
	}
}

// Serve serves on ln until ctx ends, then shuts down: the listener closes
// at once, /readyz answers 503, and the requests in flight have grace to
// finish; those still running then are stopped, and have up to 5s more
// to answer (503 with the report so far) before their connections are
// closed. It returns once no request is left, nil after a shutdown, or
// the listener's error.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	const stoppedAnswerTime = 5 * time.Second
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// The body is read within the request's own deadline.
		ReadTimeout: s.cfg.RequestTimeout,
		// Past the request's deadline, so its answer can still be written.
		WriteTimeout:   s.cfg.RequestTimeout + 15*time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       zap.NewStdLog(s.log),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.stopCancel()
		s.closeGate()
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("shutting down: finishing the requests in flight", zap.Duration("grace", grace), zap.Int32("in_flight", s.active.Load()))
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown grace is over: stopping the requests still in flight", zap.Int32("in_flight", s.active.Load()))
		s.stopCancel()
		// A stopped request still answers (503 with the report so far):
		// its connection is closed once that is written, or after
		// stoppedAnswerTime (a body still being uploaded, say).
		fctx, fcancel := context.WithTimeout(context.Background(), stoppedAnswerTime)
		if err := srv.Shutdown(fctx); err != nil {
			srv.Close()
		}
		fcancel()
	}
	s.closeGate()
	s.stopCancel()
	<-errc // http.ErrServerClosed
	s.log.Info("stopped")
	return nil
}

// enter counts a POST in flight; false once the server has stopped.
func (s *Server) enter() bool {
	s.gateMu.RLock()
	defer s.gateMu.RUnlock()
	if s.closed {
		return false
	}
	s.flights.Add(1)
	s.active.Add(1)
	return true
}

func (s *Server) leave() {
	s.active.Add(-1)
	s.flights.Done()
}

// closeGate lets no POST in and waits for those in flight.
func (s *Server) closeGate() {
	s.gateMu.Lock()
	s.closed = true
	s.gateMu.Unlock()
	s.flights.Wait()
}

// readRequest checks a request's token and role (authorize) and its
// query string against params (checkQuery). The error is unauthenticated
// (401), forbidden (403) or invalid (400).
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, route string, params []string) (url.Values, error) {
	if err := s.authorize(w, r, route); err != nil {
		return nil, err
	}
	q, err := checkQuery(r.URL.RawQuery, route, params)
	if err != nil {
		return nil, httperr.New(httperr.Invalid, err.Error())
	}
	return q, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// tooLarge is the message of a 413: n is the body's declared length, or
// -1 when it was found too long while read.
func tooLarge(n, limit int64) string {
	if n >= 0 {
		return fmt.Sprintf("the body is %d bytes; the limit is %d bytes: split it into several requests", n, limit)
	}
	return fmt.Sprintf("the body is longer than the limit of %d bytes: split it into several requests", limit)
}

// checkQuery parses the query string of route and checks it against
// allowed: each known, given once and not empty; each but schema at most
// maxParamBytes of UTF-8 without control characters or surrounding white
// space. The error names the parameter.
func checkQuery(raw, route string, allowed []string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("the query string does not parse: %v", err)
	}
	var unknown []string
	for k := range q {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	slices.Sort(unknown)
	if len(unknown) > 0 {
		takes := "takes " + strings.Join(allowed, ", ")
		if len(allowed) == 0 {
			takes = "takes no query parameters"
		}
		return nil, fmt.Errorf("unknown query parameter %s: %s %s", strings.Join(unknown, ", "), route, takes)
	}
	for _, k := range allowed {
		vs, ok := q[k]
		switch {
		case !ok:
			continue
		case len(vs) > 1:
			return nil, fmt.Errorf("query parameter %s is given %d times; give it once", k, len(vs))
		case vs[0] == "":
			return nil, fmt.Errorf("query parameter %s is empty; leave it out for the default", k)
		}
		if k == "schema" {
			continue // checked against the configured schemas
		}
		v := vs[0]
		switch {
		case len(v) > maxParamBytes:
			return nil, fmt.Errorf("query parameter %s is %d bytes; the limit is %d", k, len(v), maxParamBytes)
		case !utf8.ValidString(v):
			return nil, fmt.Errorf("query parameter %s is not UTF-8", k)
		case strings.IndexFunc(v, unicode.IsControl) >= 0:
			return nil, fmt.Errorf("query parameter %s contains a control character", k)
		case strings.TrimSpace(v) != v:
			return nil, fmt.Errorf("query parameter %s starts or ends with white space", k)
		}
	}
	return q, nil
}

// bodyFormat returns the format of a body with header's Content-Type
// (JSONL for application/json too, which isJSON marks: jsonToLines turns
// it into JSONL). A charset other than UTF-8 (or US-ASCII, its subset),
// and a Content-Encoding, are refused; the error names the supported
// types.
func bodyFormat(h http.Header) (format ingest.Format, isJSON bool, err error) {
	ct := h.Get("Content-Type")
	if ct == "" {
		return "", false, fmt.Errorf("no Content-Type; send %s", supportedTypes)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", false, fmt.Errorf("Content-Type %q does not parse: %v; send %s", ct, err, supportedTypes)
	}
	// US-ASCII is taken on purpose: it is a subset of UTF-8 (RFC 3629,
	// section 1), and the default charset of text/* types (RFC 2046,
	// section 4.1.2) that some clients send.
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
		return "", false, fmt.Errorf("charset %q: only UTF-8 is read; convert the body (iconv -f %s -t utf-8)", cs, cs)
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return "", false, fmt.Errorf("Content-Encoding %q is not supported; send the body uncompressed", ce)
	}
	switch mt {
	case ContentTypeNDJSON, ContentTypeJSONL:
		return ingest.FormatJSONL, false, nil
	case ContentTypeCSV:
		return ingest.FormatCSV, false, nil
	case ContentTypeJSON:
		return ingest.FormatJSONL, true, nil
	}
	return "", false, fmt.Errorf("Content-Type %q is not supported; send %s", mt, supportedTypes)
}
