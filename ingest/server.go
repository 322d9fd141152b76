package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/extractq/extractq/internal/httpguard"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// The HTTP way in (`ingest serve`): POST /v1/messages takes a body of
// messages, runs it through an Ingester as one new batch, exactly as a
// file, and answers with the Report that `ingest -json` prints. GET
// /v1/batches/{id} says where a batch stands, and waits for it to be done
// with wait=D; GET /v1/batches/{id}/results streams its messages' results
// as JSONL. POST /v1/erasures erases the text of the messages a customer
// asked to have erased. GET /healthz answers while the process is up, GET /readyz
// while Postgres and NATS are reachable. Errors are {"error": {"code", "message"}}; a 422,
// and a 503 that stopped part way, carry the report's fields beside it.
// Before any route: a request from a web page of another origin is 403,
// and, without a token, one whose Host is not a loopback name 421.

// Defaults of ServerConfig.
const (
	// DefaultMaxBodyBytes is the largest request body taken, in bytes
	// (32 MiB).
	DefaultMaxBodyBytes = 32 << 20
	// DefaultServeParallel is how many lines of one request are recorded
	// and published at once.
	DefaultServeParallel = 4
	// DefaultMaxRequests is how many POST /v1/messages are handled at once.
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

// messagesParams are the query parameters POST /v1/messages takes;
// batchParams those GET /v1/batches/{id} takes.
var (
	messagesParams = []string{"schema", "batch", "name"}
	batchParams    = []string{"wait"}
	resultsParams  = []string{"after"}
)

// MaxBatchWait is the longest wait GET /v1/batches/{id}?wait= takes.
const MaxBatchWait = time.Minute

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
	// MaxBodyBytes is the largest body taken, in bytes; a larger one is
	// answered 413 and nothing of it is stored. Default DefaultMaxBodyBytes.
	// A body is held in memory while it is ingested, so at most
	// MaxRequests * MaxBodyBytes bytes are held at once.
	MaxBodyBytes int64
	// Token, when set, is the bearer token every API request must carry
	// (Authorization: Bearer TOKEN). Empty means none: ServeCommand then
	// listens on a loopback address only, and the server answers only
	// requests whose Host names a loopback address (421 otherwise).
	Token string
	// Parallel is how many lines of one request are recorded and
	// published at once. Default DefaultServeParallel.
	Parallel int
	// MaxRequests is how many POSTs are handled at once; one more waits up
	// to BusyWait, then is answered 429. Default DefaultMaxRequests.
	MaxRequests int
	// BusyWait: see MaxRequests. Default DefaultBusyWait.
	BusyWait time.Duration
	// RequestTimeout bounds one request; an ingest still running then
	// stops, and the answer is 503 with how far it got. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Registry, when set, gets the server's metrics, and GET /metrics
	// serves what it gathers (Prometheus text format, no token needed).
	Registry *prometheus.Registry
	// ResultsPage is how many messages GET /v1/batches/{id}/results reads
	// from Postgres at a time. Default 1000.
	ResultsPage int
	// Logger logs one line per POST: its status, batch, counts and
	// duration, never a message's text or the token.
	Logger *zap.Logger
}

// Server is the HTTP ingest server: an http.Handler, and Serve to run it.
type Server struct {
	cfg       ServerConfig
	log       *zap.Logger
	tokenHash [sha256.Size]byte
	mux       *http.ServeMux
	metrics   *serverMetrics // nil without a Registry
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
	s := &Server{cfg: cfg, log: log.Named("http"), sem: make(chan struct{}, cfg.MaxRequests)}
	if cfg.Token != "" {
		s.tokenHash = sha256.Sum256([]byte(cfg.Token))
	}
	s.stop, s.stopCancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	// Every route caps its body before anything reads it: a route that
	// takes none refuses one, the others read at most their limit.
	if cfg.Registry != nil {
		s.metrics = newServerMetrics(cfg.Registry)
		mux.Handle("GET /metrics", limitBody("GET /metrics", 0, promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{})))
	}
	// Each API route, instrumented, and a 405 for its other methods.
	var routes []string
	route := func(method, path string, maxBody int64, h http.HandlerFunc) {
		routes = append(routes, method+" "+path)
		mux.Handle(method+" "+path, limitBody(method+" "+path, maxBody, s.metrics.instrument(path, h)))
		mux.Handle(path, limitBody("", 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+path+": the route takes "+method)
		})))
	}
	route("POST", "/v1/messages", cfg.MaxBodyBytes, s.messages)
	route("GET", "/v1/batches/{id}", 0, s.batch)
	route("GET", "/v1/batches/{id}/results", 0, s.results)
	route("POST", "/v1/erasures", maxErasureBody, s.erasures)
	routes = append(routes, "GET /healthz", "GET /readyz", "GET /metrics")
	mux.Handle("GET /healthz", limitBody("GET /healthz", 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	mux.Handle("GET /readyz", limitBody("GET /readyz", 0, http.HandlerFunc(s.readyz)))
	mux.Handle("/", limitBody("", 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route %s %s; the routes are %s and %s",
			r.Method, r.URL.Path, strings.Join(routes[:len(routes)-1], ", "), routes[len(routes)-1]))
	})))
	s.mux = mux
	return s, nil
}

// ServeHTTP serves the routes. Without a token it answers only requests
// whose Host names a loopback address (httpguard.IsLoopbackHost), and 421
// any other, so a page elsewhere cannot reach the server through DNS
// rebinding: its name, bound to 127.0.0.1, is still its own in Host. A
// request from a web page of another origin (crossOrigin) is 403, token
// or not.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token == "" && !httpguard.IsLoopbackHost(r.Host) {
		s.log.Warn("refused a request naming a Host that is not loopback: no token is set", zap.String("host", r.Host),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		writeError(w, http.StatusMisdirectedRequest, "misdirected_request", fmt.Sprintf("Host %q: without a token this server answers only "+
			"requests to a loopback host (localhost, 127.0.0.1, [::1]); to serve other names, set a token (INGEST_TOKEN or -token-file)", r.Host))
		return
	}
	if why := crossOrigin(r); why != "" {
		s.log.Warn("refused a request from a page of another origin", zap.String("origin", r.Header.Get("Origin")),
			zap.String("sec_fetch_site", r.Header.Get("Sec-Fetch-Site")), zap.String("host", r.Host),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		writeError(w, http.StatusForbidden, "cross_origin", why+": the API answers programs, not web pages of other origins")
		return
	}
	// No route takes a form or a file upload (nor parses one): refused
	// before routing, so none is ever read as one.
	if mt, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Type"))), ";"); strings.HasPrefix(mt, "multipart/") {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf("Content-Type %q: no route takes a multipart body "+
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
func limitBody(route string, maxBody int64, h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if maxBody == 0 && route != "" && r.ContentLength > 0 {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("%s takes no body; this one is %d bytes", route, r.ContentLength))
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

// batchStatus is the answer of GET /v1/batches/{id}: the batch's counts,
// calls and cost (store.BatchSummary), and whether it is done.
type batchStatus struct {
	store.BatchSummary
	Done bool `json:"done"`
}

// batch is GET /v1/batches/{id}: where the batch stands. With wait=D (a
// Go duration up to MaxBatchWait) it answers once the batch is done or D
// has passed, whichever comes first, and done says which; polling
// Postgres from every 250ms up to every 2s. An unknown batch is 404, a
// bad wait 400, and Postgres unreachable 503.
func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	q, ok := s.readRequest(w, r, "GET /v1/batches/{id}", batchParams)
	if !ok {
		return
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		var err error
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > MaxBatchWait {
			writeError(w, http.StatusBadRequest, "bad_parameter", fmt.Sprintf("wait %q: want a duration such as 30s, at most %v", v, MaxBatchWait))
			return
		}
	}
	id, ctx := r.PathValue("id"), r.Context()
	deadline, poll := time.Now().Add(wait), 250*time.Millisecond
	for {
		bs, ok := s.readBatch(w, r, id)
		if !ok {
			return
		}
		left := time.Until(deadline)
		if bs.Done() || left <= 0 || s.draining.Load() || s.stop.Err() != nil {
			writeJSON(w, http.StatusOK, batchStatus{BatchSummary: bs, Done: bs.Done()})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stop.Done():
		case <-time.After(min(poll, left)):
		}
		poll = min(2*poll, 2*time.Second)
	}
}

// results is GET /v1/batches/{id}/results: one JSON line per message of
// the batch (store.BatchResult: its run's status, its triage item's, and
// its current result or null), by message id, read from Postgres a page
// at a time. after=ID starts past message ID, to resume a download that
// was cut. An unknown batch is 404. If Postgres fails part way, the last
// line is {"error": {...}} naming the after= to resume with.
func (s *Server) results(w http.ResponseWriter, r *http.Request) {
	q, ok := s.readRequest(w, r, "GET /v1/batches/{id}/results", resultsParams)
	if !ok {
		return
	}
	var err error
	var after int64
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			writeError(w, http.StatusBadRequest, "bad_parameter", fmt.Sprintf("after %q: want a message id (an integer, 0 or more)", v))
			return
		}
	}
	id, ctx, st := r.PathValue("id"), r.Context(), s.cfg.Store
	if _, ok := s.readBatch(w, r, id); !ok {
		return
	}
	w.Header().Set("Content-Type", ContentTypeNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	n, last := 0, after
	errGone := errors.New("the client went away")
	err = st.BatchResultPages(ctx, st.Pool, store.BatchResultListParams{BatchID: id, After: after, Limit: s.cfg.ResultsPage},
		func(page []store.BatchResult) error {
			for _, row := range page {
				if err := enc.Encode(row); err != nil {
					return errGone
				}
			}
			n, last = n+len(page), page[len(page)-1].MessageID
			_ = rc.Flush()
			return nil
		})
	switch {
	case err == nil:
		s.log.Debug("results sent", zap.String("batch_id", id), zap.Int("messages", n))
	case errors.Is(err, errGone) || ctx.Err() != nil:
	default:
		s.log.Warn("reading a batch's results", zap.String("batch_id", id), zap.Int("written", n), zap.Error(err))
		var e apiError
		e.Error.Code = "unavailable"
		e.Error.Message = fmt.Sprintf("the results could not be read past message %d (is Postgres down?): ask again with after=%d", last, last)
		_ = enc.Encode(e)
	}
}

// readRequest checks a GET's token and query string against params
// (checkQuery), answering 401 or 400 and returning false when one is
// wrong.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, route string, params []string) (url.Values, bool) {
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="extractq-ingest"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong token: send Authorization: Bearer TOKEN")
		return nil, false
	}
	q, err := checkQuery(r.URL.RawQuery, route, params)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_parameter", err.Error())
		return nil, false
	}
	return q, true
}

// readBatch reads where batch id stands. It answers 404 for an unknown
// batch and 503 when Postgres fails (nothing when the client went away),
// and returns false then.
func (s *Server) readBatch(w http.ResponseWriter, r *http.Request, id string) (store.BatchSummary, bool) {
	if !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		// No batch id holds such bytes, and Postgres would refuse them.
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("there is no batch %q: a batch id is UTF-8 text without NUL", id))
		return store.BatchSummary{}, false
	}
	bs, err := s.cfg.Store.BatchSummary(r.Context(), s.cfg.Store.Pool, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("there is no batch %q", id))
	case err != nil && r.Context().Err() != nil:
		// the client went away
	case err != nil:
		s.log.Warn("reading a batch", zap.String("batch_id", id), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the batch cannot be read now (is Postgres down?)")
	default:
		return bs, true
	}
	return bs, false
}

// ready reports why the server cannot ingest now ("" when it can):
// Postgres does not answer a ping within 2s, or NATS is not connected.
// The error is the ping's.
func (s *Server) ready(ctx context.Context) (string, error) {
	if s.draining.Load() {
		return "the server is shutting down", nil
	}
	if !s.cfg.Conn.IsConnected() {
		return "NATS is not connected", nil
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.cfg.Store.Pool.Ping(pctx); err != nil {
		return "Postgres is unreachable", err
	}
	return "", nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	why, err := s.ready(r.Context())
	if why != "" {
		s.log.Debug("not ready", zap.String("why", why), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, http.StatusServiceUnavailable, "unavailable", why)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// apiError is the body of an error answer; Report, when set, adds the
// report's fields beside "error" (a 422, a 503 part way).
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	*Report
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeReportError(w, status, code, message, nil)
}

func writeReportError(w http.ResponseWriter, status int, code, message string, rep *Report) {
	var e apiError
	e.Error.Code, e.Error.Message, e.Report = code, message, rep
	writeJSON(w, status, e)
}

// requestLog is what the one log line of a POST says.
type requestLog struct {
	status   int
	code     string
	err      error
	bytes    int
	format   Format
	schema   string
	sum      *Summary
	canceled bool
}

// messages is POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var rl requestLog
	fail := func(status int, code, message string) {
		rl.status, rl.code = status, code
		writeError(w, status, code, message)
	}
	if !s.enter() {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		fail(http.StatusServiceUnavailable, "unavailable", "the server is shutting down")
		s.logRequest(r, start, rl)
		return
	}
	// Logged before it leaves, so before Serve returns.
	defer s.leave()
	defer func() { s.logRequest(r, start, rl) }()
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="extractq-ingest"`)
		fail(http.StatusUnauthorized, "unauthorized", "missing or wrong token: send Authorization: Bearer TOKEN")
		return
	}
	q, err := checkQuery(r.URL.RawQuery, "POST /v1/messages", messagesParams)
	if err != nil {
		fail(http.StatusBadRequest, "bad_parameter", err.Error())
		return
	}
	schema := q.Get("schema")
	if schema == "" {
		schema = s.cfg.Schemas[0]
	} else if !slices.Contains(s.cfg.Schemas, schema) {
		fail(http.StatusBadRequest, "unknown_schema", fmt.Sprintf("schema %q is not configured; the configured schemas are %s", schema, strings.Join(s.cfg.Schemas, ", ")))
		return
	}
	rl.schema = schema
	format, isJSON, err := bodyFormat(r.Header)
	if err != nil {
		fail(http.StatusUnsupportedMediaType, "unsupported_media_type", err.Error())
		return
	}
	rl.format = format
	if isJSON {
		rl.format = "json" // read as JSONL once turned into lines; logged as sent
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		fail(http.StatusRequestEntityTooLarge, "body_too_large", tooLarge(r.ContentLength, s.cfg.MaxBodyBytes))
		return
	}

	// Bodies are held in memory: at most MaxRequests of them.
	if !s.acquire(r.Context()) {
		w.Header().Set("Retry-After", "1")
		fail(http.StatusTooManyRequests, "busy", fmt.Sprintf("the server handles %s at once (-max-requests) and all are taken; try again shortly", plural(s.cfg.MaxRequests, "request", "requests")))
		return
	}
	defer func() { <-s.sem }()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	defer context.AfterFunc(s.stop, cancel)()

	// Unreachable before the body is read, so nothing of it is started.
	if why, err := s.ready(ctx); why != "" {
		rl.err = err
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		fail(http.StatusServiceUnavailable, "unavailable", why+"; nothing was stored: post the body again later")
		return
	}
	body, err := s.readBody(w, r)
	rl.bytes = len(body)
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		fail(http.StatusRequestEntityTooLarge, "body_too_large", tooLarge(-1, mbe.Limit))
		return
	}
	if err != nil {
		rl.err, rl.canceled = err, r.Context().Err() != nil
		if s.stop.Err() != nil {
			fail(http.StatusServiceUnavailable, "unavailable", "the server is shutting down; nothing was stored: post the body again later")
			return
		}
		fail(http.StatusBadRequest, "bad_body", fmt.Sprintf("reading the body: %v", err))
		return
	}
	if len(body) == 0 {
		fail(http.StatusBadRequest, "empty_body", "the body is empty; send messages as JSONL, CSV or JSON")
		return
	}
	// Refused whole, before it is read as lines: a compressed body sent
	// without Content-Encoding, an archive, UTF-16, binary data.
	if ue := sniff(body[:min(len(body), SniffBytes)], format); ue != nil {
		if isJSON {
			ue.Format = formatJSON
		}
		fail(http.StatusBadRequest, ue.code(), ue.bodyMessage())
		return
	}
	input := body
	switch {
	case isJSON:
		lines, err := jsonToLines(body)
		if err != nil {
			fail(http.StatusBadRequest, "invalid_json", err.Error())
			return
		}
		input = lines
	case format == FormatCSV:
		// The header is checked here, so a bad one is told apart from a
		// failure to record the batch.
		if _, err := newCSVInput(bytes.NewReader(body)); err != nil {
			if ee, ok := errors.AsType[*EmptyInputError](err); ok {
				fail(http.StatusBadRequest, "no_messages", fmt.Sprintf("the body holds no messages (%s); no batch was recorded", ee.Reason))
				return
			}
			msg := err.Error()
			if first := bytes.TrimLeft(body, "\xef\xbb\xbf \t\r\n"); len(first) > 0 && first[0] == '{' {
				msg += "; the body looks like JSONL: send it with Content-Type: " + ContentTypeNDJSON
			}
			fail(http.StatusBadRequest, "bad_csv_header", msg)
			return
		}
	}

	ing, err := New(Config{
		Store: s.cfg.Store, Publisher: s.cfg.Publisher, SchemaID: schema, MaxTextBytes: s.cfg.MaxTextBytes,
		BatchID: q.Get("batch"), SourceName: sourceName(r, q.Get("name")), Format: format,
		Parallel: s.cfg.Parallel, Logger: s.log,
	})
	if err != nil {
		rl.err = err
		fail(http.StatusInternalServerError, "internal", "internal error; it has been logged")
		return
	}
	sum, runErr := ing.Run(ctx, bytes.NewReader(input))
	rl.sum, rl.err = &sum, runErr
	rl.canceled = r.Context().Err() != nil
	if runErr != nil {
		s.runFailed(ctx, w, r, sum, runErr, &rl)
		return
	}

	rep := newReport(sum)
	status := http.StatusOK
	if sum.Lines > 0 && sum.Rejected == sum.Lines {
		status = http.StatusUnprocessableEntity
		if !isJSON && sum.csvReadAsJSONL() {
			rep.Hint = "the body looks like CSV: send it with Content-Type: " + ContentTypeCSV
		}
	}
	octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ocancel()
	if err := addOutcomes(octx, s.cfg.Store, sum, &rep); err != nil {
		rl.err = fmt.Errorf("reading batch %s: %w", sum.BatchID, err)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		rl.status, rl.code = http.StatusServiceUnavailable, "unavailable"
		writeReportError(w, rl.status, rl.code, "the body was ingested (the counts are in this answer) but the batch's outcomes could not be read "+
			"(queued and the rest read 0); posting it again without a batch id is safe: its messages are duplicates", &rep)
		return
	}
	rl.status = status
	if status == http.StatusUnprocessableEntity {
		rl.code = "nothing_accepted"
		writeReportError(w, status, rl.code, fmt.Sprintf("%s rejected (see errors); nothing was queued%s", allLinesWere(sum.Lines), optional("; %s", rep.Hint)), &rep)
		return
	}
	writeJSON(w, status, rep)
}

// runFailed answers a Run that returned err.
func (s *Server) runFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, sum Summary, err error, rl *requestLog) {
	fail := func(status int, code, message string, rep *Report) {
		rl.status, rl.code = status, code
		writeReportError(w, status, code, message, rep)
	}
	_, started := errors.AsType[*StartError](err)
	if ee, ok := errors.AsType[*EmptyInputError](err); ok {
		fail(http.StatusBadRequest, "no_messages", fmt.Sprintf("the body holds no messages (%s); no batch was recorded", ee.Reason), nil)
		return
	}
	if ue, ok := errors.AsType[*UnreadableInputError](err); ok {
		fail(http.StatusBadRequest, ue.code(), ue.bodyMessage(), nil)
		return
	}
	if started && errors.Is(err, store.ErrConflict) {
		fail(http.StatusConflict, "batch_exists", fmt.Sprintf("batch %q already exists; a batch id is used once: leave out batch for a new one", sum.BatchID), nil)
		return
	}
	why := "Postgres or NATS failed"
	switch {
	case s.stop.Err() != nil:
		why = "the server is shutting down"
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		why = fmt.Sprintf("the request took longer than %v (is the stream full, or Postgres slow?)", s.cfg.RequestTimeout)
	case r.Context().Err() != nil:
		why = "the client went away"
	}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	if started {
		fail(http.StatusServiceUnavailable, "unavailable", why+"; nothing was stored: post the body again later", nil)
		return
	}
	rep := newReport(sum)
	// Where the batch stands, if Postgres answers at once: what it
	// stored is queued (or done), published or not.
	octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = addOutcomes(octx, s.cfg.Store, sum, &rep)
	ocancel()
	fail(http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("%s; batch %s stopped after %s: the report counts what was done. "+
		"A message stored but not yet published is queued all the same (the worker's sweeper publishes it). "+
		"Post the same body again, without a batch id, to go on: the messages stored already count as duplicates",
		why, sum.BatchID, plural(sum.Lines, "line", "lines")), &rep)
}

// logRequest logs one POST, never a message's text or the token, and
// counts its lines.
func (s *Server) logRequest(r *http.Request, start time.Time, rl requestLog) {
	s.metrics.addLines(rl.sum)
	fields := []zap.Field{
		zap.Int("status", rl.status), zap.Duration("duration", time.Since(start)),
		zap.String("remote", r.RemoteAddr), zap.Int("body_bytes", rl.bytes),
	}
	if rl.code != "" {
		fields = append(fields, zap.String("code", rl.code))
	}
	if rl.format != "" {
		fields = append(fields, zap.String("format", string(rl.format)), zap.String("schema", rl.schema))
	}
	if rl.sum != nil {
		fields = append(fields, zap.String("batch_id", rl.sum.BatchID), zap.Int("lines", rl.sum.Lines),
			zap.Int("published", rl.sum.Published), zap.Int("duplicates", rl.sum.Duplicates), zap.Int("rejected", rl.sum.Rejected))
	}
	if rl.err != nil {
		fields = append(fields, zap.Error(rl.err))
	}
	if rl.canceled {
		fields = append(fields, zap.Bool("client_gone", true))
	}
	if rl.status >= 500 {
		s.log.Warn("POST /v1/messages", fields...)
		return
	}
	s.log.Info("POST /v1/messages", fields...)
}

// authorized reports whether r carries the token, compared in constant
// time (of the tokens' SHA-256, so their lengths do not show either).
// Without a token every request is.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1
}

// acquire takes one of MaxRequests, waiting up to BusyWait; false when
// none came free (or the client went away).
func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.cfg.BusyWait)
	defer t.Stop()
	select {
	case s.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// readBody reads the whole body, at most MaxBodyBytes (a
// *http.MaxBytesError past that).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(rd)
	return buf.Bytes(), err
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
// it into JSONL). A charset other than UTF-8, and a Content-Encoding, are
// refused; the error names the supported types.
func bodyFormat(h http.Header) (format Format, isJSON bool, err error) {
	ct := h.Get("Content-Type")
	if ct == "" {
		return "", false, fmt.Errorf("no Content-Type; send %s", supportedTypes)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", false, fmt.Errorf("Content-Type %q does not parse: %v; send %s", ct, err, supportedTypes)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
		return "", false, fmt.Errorf("charset %q: only UTF-8 is read; convert the body (iconv -f %s -t utf-8)", cs, cs)
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return "", false, fmt.Errorf("Content-Encoding %q is not supported; send the body uncompressed", ce)
	}
	switch mt {
	case ContentTypeNDJSON, ContentTypeJSONL:
		return FormatJSONL, false, nil
	case ContentTypeCSV:
		return FormatCSV, false, nil
	case ContentTypeJSON:
		return FormatJSONL, true, nil
	}
	return "", false, fmt.Errorf("Content-Type %q is not supported; send %s", mt, supportedTypes)
}

// sourceName is the batch's source name: "http:" and the client's name
// (parameter name) or, without one, its IP address.
func sourceName(r *http.Request, name string) string {
	if name != "" {
		return "http:" + name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "http:" + host
}

// jsonToLines turns an application/json body, one JSON object or an array
// of values, into JSONL: each value compact on its own line, so the array's
// n-th element (from 1) is line n. Each value is then checked as a JSONL
// line is (a value that is not an object is rejected there). A body that is
// not JSON, or is neither an object nor an array, is an error naming the
// byte (from 1) where it goes wrong.
func jsonToLines(body []byte) ([]byte, error) {
	off := 0
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) {
		off = 3
	}
	trimmed := bytes.TrimLeft(body[off:], " \t\r\n")
	if len(trimmed) == 0 {
		// Blank: Run reports it as an input without messages.
		return body, nil
	}
	var values []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body[off:]))
	var err error
	switch trimmed[0] {
	case '{':
		var v json.RawMessage
		if err = dec.Decode(&v); err == nil {
			values = []json.RawMessage{v}
		}
	case '[':
		err = dec.Decode(&values)
		if err == nil && len(values) == 0 {
			return nil, errors.New("the body is an empty JSON array: it holds no messages")
		}
	default:
		return nil, fmt.Errorf("an %s body is one JSON object or an array of objects; this one starts with %q", ContentTypeJSON, trimmed[0])
	}
	if err == nil {
		end := off + int(dec.InputOffset())
		if rest := bytes.TrimLeft(body[end:], " \t\r\n"); len(rest) > 0 {
			return nil, fmt.Errorf("invalid JSON at byte %d: more after the first JSON value; send one object or an array, or JSONL with Content-Type: %s",
				len(body)-len(rest)+1, ContentTypeNDJSON)
		}
	}
	if err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			return nil, fmt.Errorf("invalid JSON at byte %d: %s", int(se.Offset)+off, strings.TrimPrefix(se.Error(), "json: "))
		}
		return nil, fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	var out bytes.Buffer
	out.Grow(len(body))
	for _, v := range values {
		// Compact keeps strings byte for byte, so ParseLine sees what was
		// sent: invalid UTF-8, keys given twice.
		if err := json.Compact(&out, v); err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		out.WriteByte('\n')
	}
	return out.Bytes(), nil
}
