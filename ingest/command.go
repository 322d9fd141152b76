package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"

	"github.com/extractq/extractq/internal/app"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
)

// CommandOptions are cmd/ingest's flags.
type CommandOptions struct {
	File       string
	ConfigPath string
	SchemaID   string
	BatchID    string
	Wait       bool
	Timeout    time.Duration
	JSON       bool
	Quiet      bool
	// Parallel is how many lines are recorded and published at once.
	Parallel int
	// PollEvery is how often -wait reads the batch's counts. Default 250ms.
	PollEvery time.Duration
}

// Report is cmd/ingest's -json output.
type Report struct {
	BatchID          string  `json:"batch_id"`
	Lines            int     `json:"lines"`
	Published        int     `json:"published"`
	Duplicates       int     `json:"duplicates"`
	Rejected         int     `json:"rejected"`
	Queued           int     `json:"queued"`
	Succeeded        int     `json:"succeeded"`
	Repaired         int     `json:"repaired"`
	Failed           int     `json:"failed"`
	LLMCalls         int     `json:"llm_calls"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	// QueuedDuplicates counts duplicates whose earlier run is still queued;
	// they are in Queued and a wait covers them.
	QueuedDuplicates int         `json:"queued_duplicates,omitempty"`
	TimedOut         bool        `json:"timed_out,omitempty"`
	Errors           []LineError `json:"errors,omitempty"`
}

// Exit statuses of RunCommand.
const (
	ExitOK      = 0
	ExitError   = 1
	ExitUsage   = 2
	ExitTimeout = 3
)

// RunCommand is cmd/ingest: it ingests o.File, optionally waits for the
// batch, and prints the report. It returns the exit status.
func RunCommand(ctx context.Context, o CommandOptions, env app.Env, log *zap.Logger, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ingest: "+format+"\n", a...)
		return ExitError
	}
	cfg, err := app.LoadConfig(o.ConfigPath, env)
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
		return ExitUsage
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

	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
		return fail("opening Postgres: %v", err)
	}
	defer st.Close()
	nc, js, err := queue.Connect(ctx, env.NATSURL, "extractq-ingest", log)
	if err != nil {
		return fail("connecting to NATS: %v", err)
	}
	defer nc.Close()
	if err := app.RetryStartup(ctx, log, "creating stream", func() error {
		_, err := queue.EnsureStream(ctx, js, cfg.NATS)
		return err
	}); err != nil {
		return fail("creating stream: %v", err)
	}

	var bar *progressbar.ProgressBar
	if !o.Quiet {
		bar = progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("ingesting "+name),
			progressbar.OptionShowBytes(true), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())
		in = io.TeeReader(in, bar)
	}
	ing, err := New(Config{
		Store: st, Publisher: queue.NewPublisher(js, cfg.NATS), SchemaID: o.SchemaID,
		MaxTextBytes: cfg.Ingest.MaxTextBytes, BatchID: o.BatchID, SourceName: name, Parallel: o.Parallel, Logger: log,
	})
	if err != nil {
		return fail("%v", err)
	}
	sum, runErr := ing.Run(ctx, in)
	if bar != nil {
		bar.Finish()
	}
	for _, le := range sum.Errors {
		fmt.Fprintf(stderr, "ingest: rejected %v\n", le)
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "ingest: stopped: %v\n", runErr)
	}

	rep := Report{BatchID: sum.BatchID, Lines: sum.Lines, Published: sum.Published, Duplicates: sum.Duplicates,
		Rejected: sum.Rejected, Errors: sum.Errors}
	code := ExitOK
	if runErr != nil {
		code = ExitError
	}
	if o.Wait && runErr == nil {
		if !waitBatch(ctx, st, sum, o, stderr) {
			rep.TimedOut = true
			code = ExitTimeout
		}
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var bs store.BatchSummary
	err = store.Retry(bctx, 10*time.Second, func() error {
		var err error
		bs, err = st.BatchSummary(bctx, st.Pool, sum.BatchID)
		return err
	})
	if err != nil {
		return fail("reading batch %s: %v", sum.BatchID, err)
	}
	waiting, _ := st.RunCountQueued(bctx, st.Pool, sum.Waiting)
	rep.Queued, rep.Succeeded, rep.Repaired, rep.Failed = bs.Queued+waiting, bs.Succeeded, bs.Repaired, bs.Failed
	rep.QueuedDuplicates = waiting
	rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens, rep.CostUSD = bs.LLMCalls, bs.PromptTokens, bs.CompletionTokens, bs.CostUSD

	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.Encode(rep)
	} else {
		fmt.Fprintf(stdout, "batch %s: %d lines, %d published, %d duplicates, %d rejected\n",
			rep.BatchID, rep.Lines, rep.Published, rep.Duplicates, rep.Rejected)
		fmt.Fprintf(stdout, "outcomes: %d succeeded, %d repaired, %d failed (to triage), %d queued\n",
			rep.Succeeded, rep.Repaired, rep.Failed, rep.Queued)
		fmt.Fprintf(stdout, "llm: %d calls, %d prompt + %d completion tokens, $%.6f\n",
			rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens, rep.CostUSD)
	}
	if code == ExitTimeout {
		fmt.Fprintf(stderr, "ingest: timed out after %v with %d messages still queued\n", o.Timeout, rep.Queued)
	}
	return code
}

// waitBatch polls the batch until no run is queued. It reports false on
// timeout or when ctx ends.
func waitBatch(ctx context.Context, st *store.Store, sum Summary, o CommandOptions, stderr io.Writer) bool {
	poll := o.PollEvery
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	deadline := time.Now().Add(o.Timeout)
	var bar *progressbar.ProgressBar
	for {
		bs, err := st.BatchSummary(ctx, st.Pool, sum.BatchID)
		if err == nil {
			if bar == nil && !o.Quiet {
				bar = progressbar.NewOptions(bs.Messages, progressbar.OptionSetWriter(stderr),
					progressbar.OptionSetDescription("extracting"), progressbar.OptionShowCount(),
					progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
			}
			if bar != nil {
				bar.Set(bs.Messages - bs.Queued)
			}
			done := bs.Done()
			if done && len(sum.Waiting) > 0 {
				n, err := st.RunCountQueued(ctx, st.Pool, sum.Waiting)
				done = err == nil && n == 0
			}
			if done {
				if bar != nil {
					bar.Finish()
				}
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
	}
}
