// Command report prints where a batch stands: its outcome counts and cost,
// a few results and triage items, and the fields that fail most.
//
// Usage:
//
//	report [-batch ID | -source FILE | -schema ID] [-examples N] [-fields N] [-since 7d] [-all-batches]
//	report -results [-format jsonl|csv] [-batch ID | -source FILE | -schema ID] > results.jsonl
//
// Without -batch it reports the newest batch that has messages (a
// re-ingest of known messages makes an empty batch), of FILE with -source.
// The failing fields are the batch's (every batch's with -all-batches),
// since -since when given. With -results it writes, instead, one JSON line
// per message of the batch: its run's status, its triage item's, and its
// current result (the lines of ingest serve's GET /v1/batches/{id}/results);
// with -format csv, a CSV of the same rows, the record's fields flattened
// into columns named from the schema (package export). It reads
// DATABASE_URL, and CONFIG (or -config) for the schema of a CSV. Exit
// status: 0 printed, 1 failed, 2 bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/internal/startup"

	"github.com/extractq/extractq/internal/since"
)

func main() {
	env := startup.ReadEnv()
	batch := flag.String("batch", "", "batch id (default: the newest batch with messages)")
	source := flag.String("source", "", "without -batch: the newest batch with messages ingested from this file")
	schema := flag.String("schema", "", "without -batch: the newest batch with messages of this schema")
	examples := flag.Int("examples", 3, "results and triage items to show")
	fields := flag.Int("fields", 10, "failing fields to show")
	sinceFlag := flag.String("since", "", "failing fields: only errors recorded since then: a look-back duration (7d, 36h), a date (2026-11-01) or an RFC 3339 time (default: all time)")
	allBatches := flag.Bool("all-batches", false, "failing fields: of every batch and schema, not only of the batch reported")
	results := flag.Bool("results", false, "write the batch's results as JSONL (one line per message) instead of the report")
	formatFlag := flag.String("format", "jsonl", "with -results: jsonl, or csv (RFC 4180, a header, the record's fields as columns)")
	configPath := flag.String("config", env.Config, "configuration file, for the schema of a CSV (default: CONFIG, else the embedded defaults)")
	flag.Parse()
	format, err := export.ParseFormat(*formatFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report: -"+err.Error())
		os.Exit(2)
	}
	switch {
	case flag.NArg() > 0:
		fmt.Fprintf(os.Stderr, "report: unexpected argument %q (the batch is chosen with -batch, -source or -schema)\n", flag.Arg(0))
		os.Exit(2)
	case *examples < 1:
		fmt.Fprintf(os.Stderr, "report: -examples %d: want 1 or more\n", *examples)
		os.Exit(2)
	case *fields < 1:
		fmt.Fprintf(os.Stderr, "report: -fields %d: want 1 or more\n", *fields)
		os.Exit(2)
	case !*results && format != export.FormatJSONL:
		fmt.Fprintln(os.Stderr, "report: -format chooses the file -results writes; add -results")
		os.Exit(2)
	case *results && (*sinceFlag != "" || *allBatches):
		fmt.Fprintln(os.Stderr, "report: -since and -all-batches choose the report's failing fields; -results writes every message of one batch and takes neither")
		os.Exit(2)
	}
	from, err := since.Parse(*sinceFlag, time.Now())
	if err != nil {
		fmt.Fprintln(os.Stderr, "report: -"+err.Error())
		os.Exit(2)
	}
	log, err := startup.NewLogger("report", "warn")
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	// A report takes a few queries; writing the results of a large batch
	// takes longer, and ends with Ctrl-C.
	ctx, stop := startup.Context()
	defer stop()
	if !*results {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{})
	if err != nil {
		_, err := cmdconfig.Step(err)
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	defer st.Close()
	if *results {
		id, err := chooseBatch(ctx, st, *batch, *source, *schema)
		if err == nil {
			var n int
			if n, err = writeResults(ctx, os.Stdout, st, id, format, *configPath, env); err == nil {
				noun := "results"
				if n == 1 {
					noun = "result"
				}
				fmt.Fprintf(os.Stderr, "report: %d %s of batch %s\n", n, noun, id)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	if err := printReport(ctx, os.Stdout, st, reportParams{
		BatchID: *batch, Source: *source, SchemaID: *schema, Examples: *examples, Fields: *fields, Since: from,
		AllBatches: *allBatches,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}
