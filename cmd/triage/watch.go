package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue"
)

// runWatch is "triage watch": it prints each new triage item's
// announcement as one JSON line on stdout until interrupted. Exit status:
// 0 interrupted, 1 NATS failed, 2 bad usage.
func runWatch(args []string) int {
	env := startup.ReadEnv()
	fs := flag.NewFlagSet("triage watch", flag.ExitOnError)
	configPath := fs.String("config", env.Config, "configuration file, for the subject prefix and schemas (CONFIG by default; without one, the embedded defaults)")
	schema := fs.String("schema", "", "only the items of this schema (default: every schema)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: triage watch [-config FILE] [-schema ID]\n\n"+
			"Prints each new triage item's announcement (NATS subject <prefix>.triage.new.<schema>) as one JSON line, until interrupted.")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "triage watch: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log, err := startup.NewLogger("triage-watch", startup.GetEnv("LOG_LEVEL", "warn"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage watch:", err)
		return 2
	}
	cfg, err := startup.LoadConfig(*configPath, env)
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage watch:", err)
		return 2
	}
	if _, ok := cfg.SchemaByID(*schema); *schema != "" && !ok {
		var ids []string
		for _, sc := range cfg.Schemas {
			ids = append(ids, sc.ID)
		}
		fmt.Fprintf(os.Stderr, "triage watch: -schema %q is not configured: want one of %s\n", *schema, strings.Join(ids, ", "))
		return 2
	}
	ctx, stop := startup.Context()
	defer stop()
	nc, _, err := cmdconfig.ConnectNATS(ctx, env, cfg.NATS, "extractq-triage-watch", log, 30*time.Second)
	if err != nil {
		_, err := cmdconfig.Step(err)
		fmt.Fprintln(os.Stderr, "triage watch:", err)
		return 1
	}
	defer nc.Close()
	out := bufio.NewWriter(os.Stdout)
	err = queue.WatchTriage(ctx, nc, cfg.NATS, *schema, func(_ string, body []byte) {
		out.Write(body)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			stop() // stdout is closed: a pipe's reader went away
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "triage watch:", err)
		return 1
	}
	return 0
}
