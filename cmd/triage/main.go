// Command triage is the human triage queue: a web UI and a JSON API where
// reviewers fix, approve, reject or re-run the runs the model got wrong.
//
// Usage:
//
//	triage [serve] [-addr ADDR] [-config FILE] [-lease D] [-insecure-cookies] [-log-level LEVEL]
//	triage admin COMMAND [flags]   (reviewer accounts and API tokens; "triage admin help")
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
	"os"
	"os/user"
	"time"

	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/extractq/extractq/internal/app"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/triage"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "admin" {
		os.Exit(runAdmin(args[1:]))
	}
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	os.Exit(serve(args))
}

func serve(args []string) int {
	env := app.ReadEnv()
	fs := flag.NewFlagSet("triage", flag.ExitOnError)
	addr := fs.String("addr", app.GetEnv("TRIAGE_ADDR", "127.0.0.1:8080"), "listen address")
	configPath := fs.String("config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	lease := fs.Duration("lease", 10*time.Minute, "how long a claim lasts (renewed while the item is open)")
	insecure := fs.Bool("insecure-cookies", false, "send the session cookie without Secure, for plain-HTTP trials off localhost")
	logLevel := fs.String("log-level", app.GetEnv("LOG_LEVEL", "info"), "debug, info, warn or error")
	_ = fs.Parse(args)

	log, err := app.NewLogger("triage", *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage:", err)
		return 2
	}
	cfg, err := app.LoadConfig(*configPath, env)
	if err != nil {
		app.Fatal(log, "loading configuration", err)
	}
	log.Info("starting triage", env.Redacted()...)
	ctx, stop := app.Context()
	defer stop()

	entries, err := app.LoadSchemas(cfg)
	if err != nil {
		app.Fatal(log, "loading schemas", err)
	}
	schemas := map[string]triage.SchemaEntry{}
	for id, e := range entries {
		schemas[id] = triage.SchemaEntry{Schema: e.Schema, PromptVersion: e.Prompt.Version}
	}
	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
		app.Fatal(log, "opening Postgres", err)
	}
	defer st.Close()

	var pub *queue.Publisher
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	nc, js, err := queue.Connect(nctx, env.NATSURL, "extractq-triage", log)
	cancel()
	if err != nil {
		log.Warn("NATS unreachable: re-runs are left for the worker's sweeper to publish", zap.Error(err))
	} else {
		defer nc.Close()
		pub = queue.NewPublisher(js, cfg.NATS)
	}

	err = triage.Run(ctx, *addr, triage.Config{
		Store: st, Schemas: schemas, Publisher: pub, Logger: log, InsecureCookies: *insecure, Lease: *lease,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		app.Fatal(log, "triage stopped", err)
	}
	log.Info("triage stopped")
	return 0
}

func runAdmin(args []string) int {
	env := app.ReadEnv()
	log, err := app.NewLogger("triage-admin", app.GetEnv("LOG_LEVEL", "warn"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage admin:", err)
		return 2
	}
	ctx, stop := app.Context()
	defer stop()
	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
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
