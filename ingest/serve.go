package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/extractq/extractq/internal/app"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
)

// DefaultServeAddr is `ingest serve`'s listen address.
const DefaultServeAddr = "127.0.0.1:8090"

// MinTokenLen is the shortest token `ingest serve` takes, in bytes.
const MinTokenLen = 16

// ServeOptions are `ingest serve`'s flags.
type ServeOptions struct {
	// Addr is the listen address (host:port). Without a token it must be
	// a loopback address.
	Addr       string
	ConfigPath string
	// Token is INGEST_TOKEN; TokenFile names a file holding the token
	// instead (white space around it is dropped). Not both.
	Token     string
	TokenFile string
	// See ServerConfig; zero means its default.
	MaxBodyBytes   int64
	Parallel       int
	MaxRequests    int
	RequestTimeout time.Duration
	// ShutdownGrace is how long the requests in flight have to finish
	// once SIGTERM or SIGINT came (ctx ended). Default 30s.
	ShutdownGrace time.Duration
	// Listening, if set, is called with the address once the server
	// listens (tests use it to learn a ":0" port).
	Listening func(net.Addr)
}

// ServeCommand is `ingest serve`: it serves the HTTP ingest server (see
// Server) until ctx ends, then shuts down gracefully. It returns the exit
// status: ExitOK after a shutdown, ExitUsage for a bad flag, a bad token,
// or no token with a listen address that is not loopback, ExitError when
// it cannot start (the configuration, Postgres, NATS, the address).
func ServeCommand(ctx context.Context, o ServeOptions, env app.Env, log *zap.Logger, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "ingest serve: "+format+"\n", a...)
		return code
	}
	if o.Addr == "" {
		o.Addr = DefaultServeAddr
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	token, err := serveToken(o)
	if err != nil {
		return fail(ExitUsage, "%v", err)
	}
	cfg, err := app.LoadConfig(o.ConfigPath, env)
	if err != nil {
		return fail(ExitError, "%v", err)
	}
	var ids []string
	for _, sc := range cfg.Schemas {
		// Every schema must load here, or a request's messages would wait
		// for a worker that cannot load it either.
		if _, err := pipeline.LoadSchema(schemas.FS, sc.ID, sc.File); err != nil {
			return fail(ExitError, "%v", err)
		}
		ids = append(ids, sc.ID)
	}

	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fail(ExitError, "listening on %s: %v", o.Addr, err)
	}
	defer ln.Close()
	if token == "" && !isLoopback(ln.Addr()) {
		return fail(ExitUsage, "no token is set (INGEST_TOKEN or -token-file), so it serves on a loopback address only, "+
			"and -addr %s listens on %s: set a token, or listen on 127.0.0.1 or [::1]", o.Addr, ln.Addr())
	}

	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
		return fail(ExitError, "opening Postgres: %v", err)
	}
	defer st.Close()
	if err := store.Retry(ctx, DBRetryTime, func() error { return st.RequireMigrated(ctx) }); err != nil {
		return fail(ExitError, "%v", err)
	}
	nc, js, err := queue.Connect(ctx, env.NATSURL, "extractq-ingest-serve", log)
	if err != nil {
		return fail(ExitError, "connecting to NATS: %v", err)
	}
	defer nc.Close()
	if err := app.RetryStartup(ctx, log, "creating stream", func() error {
		_, err := queue.EnsureStream(ctx, js, cfg.NATS)
		return err
	}); err != nil {
		return fail(ExitError, "creating stream: %v", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := NewServer(ServerConfig{
		Store: st, Publisher: queue.NewPublisher(js, cfg.NATS), Conn: nc, Schemas: ids,
		MaxTextBytes: cfg.Ingest.MaxTextBytes, MaxBodyBytes: o.MaxBodyBytes, Token: token,
		Parallel: o.Parallel, MaxRequests: o.MaxRequests, RequestTimeout: o.RequestTimeout, Logger: log,
		Registry: reg,
	})
	if err != nil {
		return fail(ExitError, "%v", err)
	}
	log.Info("serving", zap.String("addr", ln.Addr().String()), zap.Bool("token", token != ""),
		zap.Strings("schemas", ids), zap.Int64("max_body_bytes", srv.cfg.MaxBodyBytes))
	if o.Listening != nil {
		o.Listening(ln.Addr())
	}
	if err := srv.Serve(ctx, ln, o.ShutdownGrace); err != nil && !errors.Is(err, net.ErrClosed) {
		return fail(ExitError, "serving: %v", err)
	}
	return ExitOK
}

// serveToken returns the token of o: Token, or TokenFile's content with
// the white space around it dropped; "" when neither is set. A token
// shorter than MinTokenLen, or holding white space or control characters,
// is an error, as is setting both.
func serveToken(o ServeOptions) (string, error) {
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
	if len(token) < MinTokenLen {
		return "", fmt.Errorf("the token of %s is %d bytes; use at least %d (openssl rand -hex 32 makes one)", from, len(token), MinTokenLen)
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
