// Command triage is the human triage queue: a web UI and a JSON API where
// reviewers fix, approve, reject or re-run the runs the model got wrong.
//
// Usage:
//
//	triage [serve] [-addr ADDR] [-public-url URL] [-metrics-addr ADDR] [-config FILE] [-lease D] [-insecure-cookies] [-log-level LEVEL]
//	triage admin COMMAND [flags]   (reviewer accounts and API tokens; "triage admin help")
//	triage watch [-schema ID]      (new triage items' announcements, one JSON line each)
//
// It reads DATABASE_URL and NATS_URL (re-runs are published there; when
// NATS cannot be reached they are left to the worker's sweeper), and the
// configuration file for the schemas. Without reviewer accounts it serves
// on localhost only, without login.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/triage"
	"github.com/extractq/extractq/worker"
)

// usage is what `triage help` and `triage -h` print before the flags.
const usage = `usage:
  triage [serve] [flags]        serve the web UI and the JSON API (flags below)
  triage admin COMMAND [flags]  reviewer accounts and API tokens ("triage admin help")
  triage watch [-schema ID]     print new triage items' announcements, one JSON line each

flags of serve:
`

func main() {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "admin":
			os.Exit(runAdmin(args[1:]))
		case "watch":
			os.Exit(runWatch(args[1:]))
		case "serve":
			args = args[1:]
		case "help":
			args = []string{"-h"}
		}
	}
	os.Exit(serve(args))
}

func serve(args []string) int {
	env := startup.ReadEnv()
	fs := flag.NewFlagSet("triage", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", startup.GetEnv("TRIAGE_ADDR", "127.0.0.1:8080"), "listen address")
	metricsAddr := fs.String("metrics-addr", startup.GetEnv("TRIAGE_METRICS_ADDR", ""), "address of GET /metrics (Prometheus), GET /healthz and GET /readyz (the database answers), apart from the UI's; empty for none")
	configPath := fs.String("config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	lease := fs.Duration("lease", 10*time.Minute, "how long a claim lasts (renewed while the item is open)")
	publicURL := fs.String("public-url", startup.GetEnv("TRIAGE_PUBLIC_URL", ""),
		"the origin reviewers open the UI at, such as https://triage.example.com, when it is not what the server sees (behind a TLS proxy); "+
			"POSTs must come from it")
	insecure := fs.Bool("insecure-cookies", false, "send the session cookie without Secure, for plain-HTTP trials off localhost")
	logLevel := fs.String("log-level", startup.GetEnv("LOG_LEVEL", "info"), "debug, info, warn or error")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "triage: unexpected argument %q: the subcommands are serve, admin and watch, and serve's flags come after it (triage -h)\n", fs.Arg(0))
		return 2
	}
	// The store reads a lease of 0 or less as its default, so -lease -5m
	// would serve 10-minute claims without a word.
	if *lease <= 0 {
		fmt.Fprintf(os.Stderr, "triage: -lease %v: give a positive duration, such as 10m\n", *lease)
		return 2
	}

	log, err := startup.NewLogger("triage", *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage:", err)
		return 2
	}
	cfg, err := startup.LoadConfig(*configPath, env)
	if err != nil {
		cmdconfig.Fatal(log, "loading configuration", err)
	}
	log.Info("starting triage", env.Redacted()...)
	ctx, stop := startup.Context()
	defer stop()

	entries, err := worker.LoadSchemas(cfg)
	if err != nil {
		cmdconfig.Fatal(log, "loading schemas", err)
	}
	schemas := map[string]triage.SchemaEntry{}
	for id, e := range entries {
		schemas[id] = triage.SchemaEntry{Schema: e.Schema, PromptVersion: e.Prompt.Version}
	}
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{Wait: store.StartupRetryTime, Command: "triage", Budget: cfg.Postgres})
	if err != nil {
		step, err := cmdconfig.Step(err)
		cmdconfig.Fatal(log, step, err)
	}
	defer st.Close()

	var pub *queue.Publisher
	nc, js, err := cmdconfig.ConnectNATS(ctx, env, cfg.NATS, "extractq-triage", log, 10*time.Second)
	switch {
	case cmdconfig.IsSetting(err):
		// A bad security file or refused credentials is a wrong setting,
		// not NATS being down: stop, as every other command does.
		step, err := cmdconfig.Step(err)
		cmdconfig.Fatal(log, step, err)
	case err != nil:
		_, err := cmdconfig.Step(err)
		log.Warn("NATS unreachable: re-runs are left for the worker's sweeper to publish, and item pages are not live", zap.Error(err))
		nc = nil
	default:
		defer nc.Close()
		pub = queue.NewPublisher(js, cfg.NATS)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			cmdconfig.Fatal(log, "listening for /metrics", err)
		}
		// The probes' routes too: this listener is on the pod's address
		// even while the UI listens on loopback only (no account yet).
		mux := triage.HealthMux(st)
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = msrv.Serve(ln) }()
		defer msrv.Close()
		log.Info("serving /metrics, /healthz and /readyz", zap.String("addr", ln.Addr().String()))
	}
	err = triage.Run(ctx, *addr, triage.Config{
		Store: st, Schemas: schemas, Publisher: pub, Logger: log, PublicURL: *publicURL, InsecureCookies: *insecure, Lease: *lease,
		Registry: reg, Events: nc, EventsNATS: cfg.NATS,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		cmdconfig.Fatal(log, "triage stopped", err)
	}
	log.Info("triage stopped")
	return 0
}

func runAdmin(args []string) int {
	env := startup.ReadEnv()
	log, err := startup.NewLogger("triage-admin", startup.GetEnv("LOG_LEVEL", "warn"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage admin:", err)
		return 2
	}
	ctx, stop := startup.Context()
	defer stop()
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{})
	if err != nil {
		_, err := cmdconfig.Step(err)
		fmt.Fprintln(os.Stderr, "triage admin:", err)
		return 1
	}
	defer st.Close()
	actor := "admin"
	if u, err := user.Current(); err == nil {
		actor = "admin:" + u.Username
	}
	aio := triage.AdminIO{In: os.Stdin, Out: os.Stdout, Actor: actor}
	if term.IsTerminal(int(os.Stdin.Fd())) {
		aio.ReadPassword = func(prompt string) (string, error) {
			fmt.Fprint(os.Stderr, prompt)
			b, err := term.ReadPassword(int(os.Stdin.Fd()))
			fmt.Fprintln(os.Stderr)
			return string(b), err
		}
	}
	if err := triage.Admin(ctx, st, args, aio); err != nil {
		fmt.Fprintln(os.Stderr, "triage admin:", err)
		return 1
	}
	return 0
}
