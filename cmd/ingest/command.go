package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/internal/words"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
)

// fileOptions are the flags of the file mode (ingest FILE).
type fileOptions struct {
	File       string
	ConfigPath string
	SchemaID   string
	BatchID    string
	Wait       bool
	Timeout    time.Duration
	JSON       bool
	Quiet      bool
	// Format is "jsonl" or "csv"; empty means from File's extension
	// (".csv", any case, is CSV; anything else and stdin "-" are JSONL).
	Format string
	// Parallel is how many lines are recorded and published at once.
	Parallel int
	// PollEvery is how often -wait reads the batch's counts. Default 250ms.
	PollEvery time.Duration
}

// Exit statuses of the command.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitTimeout = 3
	// exitNothingIngested: nothing of the input is stored or queued,
	// because it had lines and every one was rejected (the reasons are on
	// stderr and in the report's errors), or because it holds no messages
	// at all (no byte, only blank lines, or only a CSV header row; no batch
	// is recorded and no report printed). A script feeding the wrong file
	// notices.
	exitNothingIngested = 4
)

// ingestFile is the file mode of the command: it ingests o.File,
// optionally waits for the batch, and prints the report. It returns the
// exit status.
func ingestFile(ctx context.Context, o fileOptions, env startup.Env, log *zap.Logger, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ingest: "+format+"\n", a...)
		return exitError
	}
	format, err := ingest.FormatFor(o.Format, o.File)
	if err != nil {
		fmt.Fprintf(stderr, "ingest: -format: %v\n", err)
		return exitUsage
	}
	cfg, err := startup.LoadConfig(o.ConfigPath, env)
	if err != nil {
		return fail("%v", err)
	}
	if o.SchemaID == "" {
		o.SchemaID = cfg.DefaultSchema().ID
	}
	sc, ok := cfg.SchemaByID(o.SchemaID)
	if !ok {
		var ids []string
		for _, s := range cfg.Schemas {
			ids = append(ids, s.ID)
		}
		fmt.Fprintf(stderr, "ingest: -schema %q is not in the configuration; it has: %s\n", o.SchemaID, strings.Join(ids, ", "))
		return exitUsage
	}
	// The schema must load here, or its messages would wait for a worker
	// that cannot load it either.
	if _, err := pipeline.LoadSchema(schemas.FS, sc.ID, sc.File); err != nil {
		return fail("%v", err)
	}
	var in io.Reader
	var size int64 = -1
	name := o.File
	if o.File == "-" {
		in = os.Stdin
		name = "stdin"
	} else {
		f, err := os.Open(o.File)
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		in = f
	}
	// A compressed file, or one that is not text, is refused before
	// connecting: Run would refuse it too, having connected.
	head, in := ingest.ReadHead(in)
	if ue := ingest.Sniff(head, format); ue != nil {
		return refuseUnreadable(stderr, ue, name, o.File, format)
	}

	svc, err := connect(ctx, env, "extractq-ingest", cfg, log)
	if err != nil {
		return fail("%v", err)
	}
	defer svc.Close()
	st := svc.st
	usedBatch := func() int {
		fmt.Fprintf(stderr, "ingest: batch %q already exists; a batch id is used once: leave out -batch for a new one (nothing was recorded)\n", o.BatchID)
		return exitError
	}
	if o.BatchID != "" {
		// Refused before a line is read, so that the file's rejections are
		// not listed for an ingest that cannot start. A batch made
		// meanwhile is refused by Run (the StartError below).
		if _, err := st.BatchSchemaID(ctx, st.Pool, o.BatchID); err == nil {
			return usedBatch()
		} else if !errors.Is(err, store.ErrNotFound) {
			return fail("%v", err)
		}
	}

	var bar *progressbar.ProgressBar
	if !o.Quiet {
		bar = progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("ingesting "+name),
			progressbar.OptionShowBytes(true), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())
		in = io.TeeReader(in, bar)
	}
	ing, err := ingest.New(ingest.Config{
		Store: st, Publisher: queue.NewPublisher(svc.js, cfg.NATS), SchemaID: o.SchemaID,
		MaxTextBytes: cfg.Ingest.MaxTextBytes, BatchID: o.BatchID, SourceName: name, Format: format, Parallel: o.Parallel,
		NATSRetryTime: cfg.NATS.RetryTime, MaxErrors: cfg.Ingest.MaxErrors, Logger: log,
		// Each rejection as it comes (the first MaxErrors), so a long file
		// tells at once, and its reasons are never all held.
		OnReject: func(le ingest.LineError) {
			if bar != nil {
				bar.Clear()
			}
			fmt.Fprintf(stderr, "ingest: rejected %v\n", le)
		},
	})
	if err != nil {
		return fail("%v", err)
	}
	sum, runErr := ing.Run(ctx, in)
	if bar != nil {
		bar.Finish()
	}
	if sum.ErrorsOmitted > 0 {
		fmt.Fprintf(stderr, "ingest: and %s not listed (the first %d are: ingest.max_errors)\n",
			words.Plural(sum.ErrorsOmitted, "more rejected line", "more rejected lines"), len(sum.Errors))
	}
	if ee, ok := errors.AsType[*ingest.EmptyInputError](runErr); ok {
		fmt.Fprintf(stderr, "ingest: %s holds no messages (%s); no batch was recorded\n", name, ee.Reason)
		return exitNothingIngested
	}
	if ue, ok := errors.AsType[*ingest.UnreadableInputError](runErr); ok {
		return refuseUnreadable(stderr, ue, name, o.File, format)
	}
	_, started := errors.AsType[*ingest.StartError](runErr)
	switch {
	case started && errors.Is(runErr, store.ErrConflict):
		return usedBatch()
	case runErr != nil:
		fmt.Fprintf(stderr, "ingest: stopped: %s\n", strings.TrimPrefix(runErr.Error(), "ingest: "))
	}
	if started {
		return exitError // no batch of its own to report
	}

	rep := ingest.NewReport(sum)
	code := exitOK
	switch {
	case runErr != nil:
		code = exitError
	case sum.Lines > 0 && sum.Rejected == sum.Lines:
		code = exitNothingIngested
		if sum.CSVReadAsJSONL() {
			rep.Hint = "the input looks like CSV: use -format csv"
		}
	}
	// No batch is recorded when nothing new got in: every line was
	// rejected or a duplicate. A wait still covers the duplicates whose
	// earlier run is queued.
	recorded := sum.BatchID != ""
	if o.Wait && runErr == nil && (recorded || len(sum.Waiting) > 0) {
		if !waitBatch(ctx, st, sum, o, stderr) {
			rep.TimedOut = true
			code = exitTimeout
		}
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := ingest.AddOutcomes(bctx, st, sum, &rep); err != nil {
		return fail("reading batch %s: %v", sum.BatchID, err)
	}

	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.Encode(rep)
	} else {
		writeTextReport(stdout, rep, recorded)
	}
	if sum.InvalidUTF8 > 0 {
		fmt.Fprintf(stderr, "ingest: warning: %s held bytes that are not UTF-8, stored as U+FFFD (%s): "+
			"%s is not UTF-8 (Latin-1 or Windows-1252, say); convert it before ingesting, e.g. %s "+
			"(the stored messages keep the U+FFFD; ingesting a converted copy rejects the changed texts as conflicts)\n",
			words.Plural(sum.InvalidUTF8, "message", "messages"), lineList(sum.InvalidUTF8, sum.InvalidUTF8Lines), name, iconvHint(o.File))
	}
	switch code {
	case exitTimeout:
		fmt.Fprintf(stderr, "ingest: timed out after %v with %d of the batch's messages still queued; %s\n", o.Timeout, rep.Queued, waitingOn(cfg, o.SchemaID))
	case exitNothingIngested:
		fmt.Fprintf(stderr, "ingest: %s rejected; nothing was queued%s\n", words.AllLinesWere(sum.Lines), words.Optional("; %s", rep.Hint))
	}
	return code
}

// waitingOn says which consumer the runs of schemaID wait on, and which
// workers read it.
func waitingOn(cfg *config.Config, schemaID string) string {
	c := cfg.NATS.ConsumerOf(schemaID)
	if cfg.NATS.Consumers == config.ConsumersPerSchema {
		return fmt.Sprintf("their runs wait on consumer %s of stream %s (nats.consumers per_schema): is a worker of that pool running (worker -schema %s, or one without -schema)?",
			c.Name, cfg.NATS.Stream, schemaID)
	}
	return fmt.Sprintf("their runs wait on consumer %s of stream %s: is a worker running?", c.Name, cfg.NATS.Stream)
}

// writeTextReport writes rep as ingest prints it without -json; recorded
// says a batch was recorded. A batch run on the LLM simulator is said to
// have the simulator's figures before any figure.
func writeTextReport(stdout io.Writer, rep ingest.Report, recorded bool) {
	batch := "batch " + rep.BatchID
	if !recorded {
		batch = "no batch recorded"
	}
	fmt.Fprintf(stdout, "%s: %d lines, %d published, %d duplicates, %d rejected\n",
		batch, rep.Lines, rep.Published, rep.Duplicates, rep.Rejected)
	if rep.Simulated {
		fmt.Fprintln(stdout, "SIMULATOR FIGURES: the outcomes, calls, tokens and cost below describe the LLM simulator's heuristics and settings, not a model")
	}
	fmt.Fprintf(stdout, "outcomes: %d succeeded, %d repaired, %d held (for review), %d failed (to triage), %d queued\n",
		rep.Succeeded, rep.Repaired, rep.Held, rep.Failed, rep.Queued)
	fmt.Fprintf(stdout, "llm: %d calls, %d prompt + %d completion tokens, $%.6f\n",
		rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens, rep.CostUSD)
	if rep.InvalidUTF8 > 0 {
		fmt.Fprintf(stdout, "invalid UTF-8: %s stored with U+FFFD in place of bytes that are not UTF-8 (flag %s)\n",
			words.Plural(rep.InvalidUTF8, "message", "messages"), ingest.FlagInvalidUTF8)
	}
}

// refuseUnreadable says on stderr that the input (name, of file) is ue,
// and how to ingest it, and returns the exit status: exitError, as for a
// bad CSV header.
func refuseUnreadable(stderr io.Writer, ue *ingest.UnreadableInputError, name, file string, format ingest.Format) int {
	fmt.Fprintf(stderr, "ingest: %s %s; nothing was read and no batch was recorded%s\n", name, ue.Describe(), unpackHint(ue, file, format))
	return exitError
}

// unpackHint is the rest of the message refusing file (the input that
// was to be read as format), ue: how to turn it into text and ingest it
// from stdin ("-"), with -format csv when it is CSV (asked for, or named
// so under its compression: "in.csv.gz"). "" for binary data.
func unpackHint(ue *ingest.UnreadableInputError, file string, format ingest.Format) string {
	unpack := ue.Unpack(file)
	if unpack == "" {
		return ": is it the file you meant?"
	}
	if format != ingest.FormatCSV {
		inner := strings.TrimSuffix(file, filepath.Ext(file))
		if ue.Kind != ingest.KindUTF16 && strings.EqualFold(filepath.Ext(inner), ".csv") {
			format = ingest.FormatCSV
		}
	}
	to := "ingest -"
	if format == ingest.FormatCSV {
		to = "ingest -format csv -"
	}
	verb := "decompress it into ingest"
	switch ue.Kind {
	case ingest.KindZip, ingest.KindTar:
		verb = "extract the file from it into ingest"
	case ingest.KindUTF16:
		verb = "convert it into ingest"
	}
	if file == "-" {
		return fmt.Sprintf("; %s, adding your other flags: ... | %s | %s", verb, unpack, to)
	}
	return fmt.Sprintf("; %s, adding your other flags: %s | %s", verb, unpack, to)
}

// lineList names the lines of n messages, of which lines are the first:
// "line 7", "lines 2, 5, 9", "lines 1, 2, 3, 4, 5 and 12 more".
func lineList(n int, lines []int) string {
	nums := make([]string, len(lines))
	for i, l := range lines {
		nums[i] = strconv.Itoa(l)
	}
	out := "lines " + strings.Join(nums, ", ")
	if n == 1 && len(lines) == 1 {
		out = "line " + nums[0]
	}
	if more := n - len(lines); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// iconvHint is the command converting file from Latin-1 to UTF-8, into a
// new file next to it ("in.csv" to "in.utf8.csv"); for stdin ("-"), the
// filter to pipe it through.
func iconvHint(file string) string {
	if file == "-" {
		return "iconv -f latin1 -t utf-8"
	}
	ext := filepath.Ext(file)
	out := strings.TrimSuffix(file, ext) + ".utf8" + ext
	return fmt.Sprintf("iconv -f latin1 -t utf-8 %s > %s", words.ShellQuote(file), words.ShellQuote(out))
}

// waitBatch waits, as ingest.Wait does, until no run of sum is queued,
// with a progress bar unless o.Quiet. It reports false on timeout or
// when ctx ends.
func waitBatch(ctx context.Context, st *store.Store, sum ingest.Summary, o fileOptions, stderr io.Writer) bool {
	var bar *progressbar.ProgressBar
	ok := ingest.Wait(ctx, st, sum, ingest.WaitOptions{PollEvery: o.PollEvery, Timeout: o.Timeout, Progress: func(done, total int) {
		if bar == nil && !o.Quiet {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(stderr),
				progressbar.OptionSetDescription("extracting"), progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
		}
		if bar != nil {
			bar.Set(done)
		}
	}})
	if ok && bar != nil {
		bar.Finish()
	}
	return ok
}
