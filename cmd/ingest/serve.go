package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/app"
)

// serve is `ingest serve` with its arguments (after "serve"); token is
// INGEST_TOKEN. It returns the exit status.
func serve(ctx context.Context, args []string, env app.Env, token string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ingest serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := ingest.ServeOptions{Token: token}
	fs.StringVar(&o.Addr, "addr", ingest.DefaultServeAddr, "listen address; without a token it must be a loopback one")
	fs.StringVar(&o.ConfigPath, "config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	fs.StringVar(&o.TokenFile, "token-file", "", "file holding the bearer token (instead of INGEST_TOKEN)")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", ingest.DefaultMaxBodyBytes, "largest request body, in bytes (larger: 413)")
	fs.IntVar(&o.Parallel, "parallel", ingest.DefaultServeParallel, "lines of one request recorded and published at once")
	fs.IntVar(&o.MaxRequests, "max-requests", ingest.DefaultMaxRequests, "requests handled at once (one more waits 5s, then 429)")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", ingest.DefaultRequestTimeout, "longest one request may take, body upload included")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM or SIGINT, how long requests in flight have to finish")
	logLevel := fs.String("log-level", app.GetEnv("LOG_LEVEL", "info"), "debug, info, warn or error (info: one line per request, never message text)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ingest serve [flags]\n\n"+
			"Serves POST /v1/messages (Content-Type application/x-ndjson, application/jsonl, text/csv or application/json;\n"+
			"query parameters schema, batch, name), GET /v1/batches/{id} (query parameter wait, up to 1m),\n"+
			"GET /v1/batches/{id}/results (JSONL; query parameter after), POST /v1/erasures (JSON),\n"+
			"GET /healthz, GET /readyz and GET /metrics. The bearer token comes from\n"+
			"INGEST_TOKEN or -token-file; without one it listens on a loopback address only, and answers\n"+
			"only requests whose Host is a loopback name (localhost, 127.0.0.1, [::1]; else 421).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ingest.ExitOK
		}
		return ingest.ExitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "ingest serve: takes no arguments, got %q (to ingest a file named serve: ingest ./serve)\n", fs.Args())
		return ingest.ExitUsage
	}
	for name, v := range map[string]int64{"-max-body-bytes": o.MaxBodyBytes, "-parallel": int64(o.Parallel), "-max-requests": int64(o.MaxRequests),
		"-request-timeout": int64(o.RequestTimeout), "-shutdown-grace": int64(o.ShutdownGrace)} {
		if v <= 0 {
			fmt.Fprintf(stderr, "ingest serve: %s must be above 0\n", name)
			return ingest.ExitUsage
		}
	}
	log, err := app.NewLogger("ingest", *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "ingest serve:", err)
		return ingest.ExitUsage
	}
	code := ingest.ServeCommand(ctx, o, env, log, stderr)
	_ = log.Sync()
	return code
}
