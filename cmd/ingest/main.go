// Command ingest reads customer messages from a JSONL or CSV file (or "-"
// for stdin), records each in Postgres and publishes its run to the stream;
// `ingest serve` takes them over HTTP instead.
//
// Usage:
//
//	ingest [-format jsonl|csv] [-schema ID] [-batch ID] [-wait] [-timeout D] [-json] [-config FILE] FILE
//	ingest serve [-addr HOST:PORT] [-token-file FILE] [-config FILE] [flags]
//
// In JSONL, each line is a JSON object with "id" and "text"; "source" is
// optional and other keys are kept as metadata. CSV (the default for a
// file named *.csv) has a header row with columns id and text, source
// optional, and every other column kept as metadata. A bad line or record
// is reported with its line number and the rest goes on. With -wait it shows progress on stderr until every
// message of the batch has an outcome. With -json it prints one JSON object
// on stdout: batch_id, published, duplicates, rejected, queued, succeeded,
// repaired, failed, llm_calls, prompt_tokens, completion_tokens, cost_usd,
// and, when some messages held bytes that are not UTF-8 (stored as
// U+FFFD, with a warning on stderr), invalid_utf8 and invalid_utf8_lines.
// Rejected lines are listed on stderr as they come and in errors, the
// first ingest.max_errors of them; errors_omitted counts the rest. A
// value the database cannot store rejects its line, never the file.
//
// Exit status: 0 done; 1 an error stopped it; 2 bad usage; 3 -wait timed
// out with messages still queued; 4 nothing was ingested: every line was
// rejected, or the input holds no messages (it is empty, or has only blank
// lines or only a CSV header row; no batch is recorded). A CSV header
// without id or text, or with a column named twice, stops it (status 1)
// before anything is recorded; so does an input that is compressed
// (gzip, zstd, bzip2, xz), an archive (zip, tar), UTF-16 or not text at
// all, with the command that turns it into text: gunzip -c FILE | ingest -.
//
// Flags come before FILE: the flag package stops at the first argument
// that is not a flag, so `ingest FILE -wait` is refused, naming -wait.
//
// "serve" is the subcommand only as the first argument: a file named
// serve is read with `ingest ./serve` (or with a flag before it, such as
// `ingest -json serve`). `ingest serve` serves POST /v1/messages (a body of
// JSONL, CSV or JSON, ingested as one batch; the answer is the -json
// report), GET /v1/batches/{id} (where a batch stands; ?wait=30s waits for
// it to be done), GET /v1/batches/{id}/results (its messages' results, as
// JSONL), POST /v1/erasures (erase customers' messages on request), GET
// /healthz and GET /readyz; see ingestapi.Server and docs/input.md.
// Its token comes from INGEST_TOKEN or -token-file; without one it listens
// on a loopback address only, and answers only requests whose Host names
// one (else 421).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/extractq/extractq/internal/startup"
)

func main() {
	env := startup.ReadEnv()
	ctx, stop := startup.Context()
	code := run(ctx, os.Args[1:], env, os.Getenv("INGEST_TOKEN"), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command with its arguments (without the program name); token
// is INGEST_TOKEN. It returns the exit status.
func run(ctx context.Context, args []string, env startup.Env, token string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return serve(ctx, args[1:], env, token, stderr)
	}
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o fileOptions
	fs.StringVar(&o.ConfigPath, "config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	fs.StringVar(&o.SchemaID, "schema", "", "schema id to extract (default: the first schema of the configuration)")
	fs.StringVar(&o.BatchID, "batch", "", "batch id (default: a new one)")
	fs.StringVar(&o.Format, "format", "", "input format, jsonl or csv, any case (default: csv for a FILE ending in .csv, else jsonl; stdin needs -format csv)")
	fs.BoolVar(&o.Wait, "wait", false, "wait until every message of the batch has an outcome")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "with -wait, give up after this long (exit 3)")
	fs.IntVar(&o.Parallel, "parallel", 8, "lines recorded and published at once")
	fs.BoolVar(&o.JSON, "json", false, "print the batch summary as one JSON object on stdout")
	fs.BoolVar(&o.Quiet, "quiet", !term.IsTerminal(int(os.Stderr.Fd())), "no progress bars (on by default when stderr is not a terminal)")
	logLevel := fs.String("log-level", startup.GetEnv("LOG_LEVEL", "warn"), "debug, info, warn or error")
	synopsis := func() {
		fmt.Fprintf(fs.Output(), "usage: ingest [flags] FILE   (FILE - reads stdin; a file named serve: ./serve)\n"+
			"       ingest serve [flags]   (the HTTP server; ingest serve -h)\n")
	}
	fs.Usage = func() {
		synopsis()
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if o.Parallel < 1 {
		fmt.Fprintf(stderr, "ingest: -parallel must be 1 or more (how many lines are recorded and published at once; default 8), got %d\n", o.Parallel)
		return exitUsage
	}
	// ingest.Wait reads a timeout of 0 or less as none: -wait -timeout 0s
	// waited for ever, and on Ctrl-C said it had timed out after 0s.
	if o.Timeout <= 0 {
		fmt.Fprintf(stderr, "ingest: -timeout must be above 0 (how long -wait waits; default 10m), got %v\n", o.Timeout)
		return exitUsage
	}
	if why := fileArgs(args, fs.Args()); why != "" {
		fmt.Fprintf(stderr, "ingest: %s\n", why)
		synopsis()
		fmt.Fprintf(stderr, "(ingest -h lists the flags)\n")
		return exitUsage
	}
	o.File = fs.Arg(0)
	log, err := startup.NewLogger("ingest", *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "ingest:", err)
		return exitUsage
	}
	code := ingestFile(ctx, o, env, log, stdout, stderr)
	_ = log.Sync()
	return code
}

// fileArgs says what is wrong with the arguments left after the flags
// (rest, of all of args): "" when they are one FILE. The flag package
// stops at the first argument that is not a flag, so a flag after FILE
// is left there: it names it, and the command with the flags first.
func fileArgs(args, rest []string) string {
	switch {
	case len(rest) == 0:
		return "no FILE given (- reads stdin)"
	case len(rest) == 1:
		return ""
	}
	for _, a := range rest[1:] {
		if len(a) > 1 && a[0] == '-' {
			flags := args[:len(args)-len(rest)]
			fixed := append(append(append([]string{"ingest"}, flags...), rest[1:]...), rest[0])
			return fmt.Sprintf("flag %s comes after the file %s: flags must come before the file (%s)",
				a, quoteArg(rest[0]), strings.Join(quoteArgs(fixed), " "))
		}
	}
	return fmt.Sprintf("one FILE is read at a time; got %d: %s", len(rest), strings.Join(quoteArgs(rest), " "))
}

// quoteArg quotes a for a POSIX shell when it holds more than letters,
// digits and ./_-+,:@%=.
func quoteArg(a string) string {
	if a != "" && strings.IndexFunc(a, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("./_-+,:@%=", r))
	}) < 0 {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

func quoteArgs(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = quoteArg(a)
	}
	return q
}
