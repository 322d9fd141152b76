package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/extractq/extractq/export"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/schemas"
)

// serve is `ingest serve` with its arguments (after "serve"); token is
// INGEST_TOKEN. It returns the exit status.
func serve(ctx context.Context, args []string, env startup.Env, token string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ingest serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveOptions{Token: token}
	fs.StringVar(&o.Addr, "addr", defaultServeAddr, "listen address; without a token it must be a loopback one")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", startup.GetEnv("INGEST_METRICS_ADDR", ""),
		"address of GET /metrics (Prometheus), GET /healthz and GET /readyz, apart from the API's; empty: GET /metrics on -addr")
	fs.StringVar(&o.ConfigPath, "config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	fs.StringVar(&o.TokenFile, "token-file", "", "file holding the bearer token (instead of INGEST_TOKEN)")
	fs.BoolVar(&o.APITokens, "api-tokens", false, "take the API tokens of triage admin token create, each with its role and expiry")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", ingestapi.DefaultMaxBodyBytes, "largest request body, in bytes (larger: 413)")
	fs.IntVar(&o.Parallel, "parallel", ingestapi.DefaultServeParallel, "lines of one request recorded and published at once")
	fs.IntVar(&o.MaxRequests, "max-requests", ingestapi.DefaultMaxRequests, "requests handled at once (one more waits 5s, then 429)")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", ingestapi.DefaultRequestTimeout, "longest one request may take, body upload included")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM or SIGINT, how long requests in flight have to finish")
	logLevel := fs.String("log-level", startup.GetEnv("LOG_LEVEL", "info"), "debug, info, warn or error (info: one line per request, never message text)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ingest serve [flags]\n\n"+
			"Serves POST /v1/messages (Content-Type application/x-ndjson, application/jsonl, text/csv or application/json;\n"+
			"query parameters schema, batch, name), GET /v1/batches/{id} (query parameter wait, up to 1m),\n"+
			"GET /v1/batches/{id}/results (JSONL; query parameter after), POST /v1/erasures (JSON),\n"+
			"POST /v1/webhooks/{name} (the webhooks of ingest.webhooks in the configuration),\n"+
			"GET /healthz, GET /readyz and GET /metrics (on -metrics-addr when set). With -api-tokens it takes the API tokens of\n"+
			"triage admin token create (role ingest for programs that send messages; docs/input.md).\n"+
			"A bearer token from INGEST_TOKEN or -token-file acts as admin, without expiry. Without either\n"+
			"it listens on a loopback address only, and answers only requests whose Host is a loopback\n"+
			"name (localhost, 127.0.0.1, [::1]; else 421).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "ingest serve: takes no arguments, got %q (to ingest a file named serve: ingest ./serve)\n", fs.Args())
		return exitUsage
	}
	for name, v := range map[string]int64{"-max-body-bytes": o.MaxBodyBytes, "-parallel": int64(o.Parallel), "-max-requests": int64(o.MaxRequests),
		"-request-timeout": int64(o.RequestTimeout), "-shutdown-grace": int64(o.ShutdownGrace)} {
		if v <= 0 {
			fmt.Fprintf(stderr, "ingest serve: %s must be above 0\n", name)
			return exitUsage
		}
	}
	log, err := startup.NewLogger("ingest", *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "ingest serve:", err)
		return exitUsage
	}
	code := serveCommand(ctx, o, env, log, stderr)
	_ = log.Sync()
	return code
}

// defaultServeAddr is `ingest serve`'s listen address.
const defaultServeAddr = "127.0.0.1:8090"

// minTokenLen is the shortest token `ingest serve` takes, in bytes.
const minTokenLen = 16

// serveOptions are `ingest serve`'s flags.
type serveOptions struct {
	// Addr is the listen address (host:port). Without a token it must be
	// a loopback address.
	Addr       string
	ConfigPath string
	// Token is INGEST_TOKEN; TokenFile names a file holding the token
	// instead (white space around it is dropped). Not both.
	Token     string
	TokenFile string
	// APITokens takes the store's API tokens (ingestapi.ServerConfig).
	APITokens bool
	// See ingestapi.ServerConfig; zero means its default.
	MaxBodyBytes   int64
	Parallel       int
	MaxRequests    int
	RequestTimeout time.Duration
	// ShutdownGrace is how long the requests in flight have to finish
	// once SIGTERM or SIGINT came (ctx ended). Default 30s.
	ShutdownGrace time.Duration
	// LookupEnv reads the webhooks' secrets (signature.secret_env);
	// default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// MetricsAddr, when set, is where GET /metrics is served, apart from
	// Addr (which then answers it 404): a port that is not the API's,
	// for Prometheus and probes (GET /healthz and GET /readyz are served
	// there too, and still on Addr). Empty: GET /metrics on Addr.
	MetricsAddr string
	// Listening, if set, is called with the address once the server
	// listens (tests use it to learn a ":0" port); MetricsListening with
	// MetricsAddr's.
	Listening        func(net.Addr)
	MetricsListening func(net.Addr)
}

// serveCommand is `ingest serve`: it serves the HTTP ingest server (see
// ingestapi.Server) until ctx ends, then shuts down gracefully. It returns
// the exit status: exitOK after a shutdown, exitUsage for a bad flag, a
// bad token, or no token with a listen address that is not loopback,
// exitError when it cannot start (the configuration, Postgres, NATS, the
// address).
func serveCommand(ctx context.Context, o serveOptions, env startup.Env, log *zap.Logger, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "ingest serve: "+format+"\n", a...)
		return code
	}
	if o.Addr == "" {
		o.Addr = defaultServeAddr
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	token, err := serveToken(o)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	cfg, err := startup.LoadConfig(o.ConfigPath, env)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	var ids []string
	for _, sc := range cfg.Schemas {
		// Every schema must load here, or a request's messages would wait
		// for a worker that cannot load it either.
		if _, err := pipeline.LoadSchema(schemas.FS, sc.ID, sc.File); err != nil {
			return fail(exitError, "%v", err)
		}
		ids = append(ids, sc.ID)
	}

	hooks, err := serveWebhooks(cfg.Ingest.Webhooks, o.LookupEnv)
	if err != nil {
		return fail(exitError, "%v", err)
	}

	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fail(exitError, "listening on %s: %v", o.Addr, err)
	}
	defer ln.Close()
	if token == "" && !o.APITokens && !isLoopback(ln.Addr()) {
		return fail(exitUsage, "no token is set (-api-tokens, INGEST_TOKEN or -token-file), so it serves on a loopback address only, "+
			"and -addr %s listens on %s: set a token, or listen on 127.0.0.1 or [::1]", o.Addr, ln.Addr())
	}

	svc, err := connect(ctx, env, "extractq-ingest-serve", cfg, log)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	defer svc.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	columns := map[string][]export.Column{}
	for _, id := range ids {
		if columns[id], err = export.SchemaColumns(cfg, id); err != nil {
			return fail(exitError, "%v", err)
		}
	}
	srv, err := ingestapi.NewServer(ingestapi.ServerConfig{
		Store: svc.st, Publisher: queue.NewPublisher(svc.js, cfg.NATS), Conn: svc.nc, Schemas: ids, ResultColumns: columns,
		MaxTextBytes: cfg.Ingest.MaxTextBytes, MaxErrors: cfg.Ingest.MaxErrors, NATSRetryTime: cfg.NATS.RetryTime,
		MaxBodyBytes: o.MaxBodyBytes, Token: token, APITokens: o.APITokens,
		Parallel: o.Parallel, MaxRequests: o.MaxRequests, RequestTimeout: o.RequestTimeout, Logger: log,
		Registry: reg, Webhooks: hooks, MetricsApart: o.MetricsAddr != "",
	})
	if err != nil {
		return fail(exitError, "%v", err)
	}
	if o.MetricsAddr != "" {
		mln, err := net.Listen("tcp", o.MetricsAddr)
		if err != nil {
			return fail(exitError, "listening on -metrics-addr %s: %v", o.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("GET /healthz", srv.Healthz())
		mux.Handle("GET /readyz", srv.Readyz())
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		log.Info("serving /metrics, /healthz and /readyz", zap.String("addr", mln.Addr().String()))
		if o.MetricsListening != nil {
			o.MetricsListening(mln.Addr())
		}
	}
	log.Info("serving", zap.String("addr", ln.Addr().String()), zap.Bool("token", token != ""), zap.Bool("api_tokens", o.APITokens),
		zap.Strings("schemas", ids), zap.Int64("max_body_bytes", cmp.Or(max(o.MaxBodyBytes, 0), ingestapi.DefaultMaxBodyBytes)),
		zap.Strings("webhooks", webhookNames(hooks)))
	if o.Listening != nil {
		o.Listening(ln.Addr())
	}
	if err := srv.Serve(ctx, ln, o.ShutdownGrace); err != nil && !errors.Is(err, net.ErrClosed) {
		return fail(exitError, "serving: %v", err)
	}
	return exitOK
}

// serveToken returns the token of o: Token, or TokenFile's content with
// the white space around it dropped; "" when neither is set. A token
// shorter than minTokenLen, or holding white space or control characters,
// is an error, as is setting both.
func serveToken(o serveOptions) (string, error) {
	token := o.Token
	from := "INGEST_TOKEN"
	if o.TokenFile != "" {
		if o.Token != "" {
			return "", errors.New("both INGEST_TOKEN and -token-file are set; set one")
		}
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return "", fmt.Errorf("-token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
		from = "-token-file " + o.TokenFile
		if token == "" {
			return "", fmt.Errorf("%s is empty", from)
		}
	}
	if token == "" {
		return "", nil
	}
	if len(token) < minTokenLen {
		return "", fmt.Errorf("the token of %s is %d bytes; use at least %d (openssl rand -hex 32 makes one)", from, len(token), minTokenLen)
	}
	if strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "", fmt.Errorf("the token of %s holds white space or a control character", from)
	}
	return token, nil
}

// isLoopback reports whether a listener's address is a loopback one.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
