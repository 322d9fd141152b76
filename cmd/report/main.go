// Command report prints where a batch stands: its outcome counts and cost,
// a few results and triage items, and the fields that fail most.
//
// Usage:
//
//	report [-batch ID | -source FILE] [-examples N] [-fields N]
//
// Without -batch it reports the newest batch that has messages (a
// re-ingest of known messages makes an empty batch), of FILE with -source. It reads
// DATABASE_URL.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/extractq/extractq/internal/app"
	"github.com/extractq/extractq/store"
)

func main() {
	env := app.ReadEnv()
	batch := flag.String("batch", "", "batch id (default: the newest batch with messages)")
	source := flag.String("source", "", "without -batch: the newest batch with messages ingested from this file")
	examples := flag.Int("examples", 3, "results and triage items to show")
	fields := flag.Int("fields", 10, "failing fields to show")
	flag.Parse()
	log, err := app.NewLogger("report", "warn")
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	defer st.Close()
	if err := app.PrintReport(ctx, os.Stdout, st, *batch, *source, *examples, *fields); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}
