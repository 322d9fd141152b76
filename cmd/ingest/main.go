// Command ingest reads customer messages from a JSONL file (or "-" for
// stdin), records each in Postgres and publishes its run to the stream.
//
// Usage:
//
//	ingest [-schema ID] [-batch ID] [-wait] [-timeout D] [-json] [-config FILE] FILE
//
// Each line is a JSON object with "id" and "text"; "source" is optional and
// other keys are kept as metadata. A bad line is reported with its number
// and the rest goes on. With -wait it shows progress on stderr until every
// message of the batch has an outcome. With -json it prints one JSON object
// on stdout: batch_id, published, duplicates, rejected, queued, succeeded,
// repaired, failed, llm_calls, prompt_tokens, completion_tokens, cost_usd.
//
// Exit status: 0 done; 1 an error stopped it; 2 bad usage; 3 -wait timed
// out with messages still queued.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/app"
)

func main() {
	env := app.ReadEnv()
	var o ingest.CommandOptions
	flag.StringVar(&o.ConfigPath, "config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	flag.StringVar(&o.SchemaID, "schema", "", "schema id to extract (default: the first schema of the configuration)")
	flag.StringVar(&o.BatchID, "batch", "", "batch id (default: a new one)")
	flag.BoolVar(&o.Wait, "wait", false, "wait until every message of the batch has an outcome")
	flag.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "with -wait, give up after this long (exit 3)")
	flag.IntVar(&o.Parallel, "parallel", 8, "lines recorded and published at once")
	flag.BoolVar(&o.JSON, "json", false, "print the batch summary as one JSON object on stdout")
	flag.BoolVar(&o.Quiet, "quiet", !term.IsTerminal(int(os.Stderr.Fd())), "no progress bars (default when stderr is not a terminal)")
	logLevel := flag.String("log-level", app.GetEnv("LOG_LEVEL", "warn"), "debug, info, warn or error")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: ingest [flags] FILE   (FILE - reads stdin)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	o.File = flag.Arg(0)
	log, err := app.NewLogger("ingest", *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(2)
	}
	ctx, stop := app.Context()
	defer stop()
	code := ingest.RunCommand(ctx, o, env, log, os.Stdout, os.Stderr)
	_ = log.Sync()
	os.Exit(code)
}
