package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/internal/words"
	"github.com/extractq/extractq/store"
)

// reportParams says which batch a report is of and how much it shows.
type reportParams struct {
	// BatchID is the batch reported. Empty means the newest batch with
	// messages, of the ingested file Source when that is not empty and of
	// schema SchemaID when that is not empty.
	BatchID, Source, SchemaID string
	// Examples is how many results and triage items are shown (at least 1);
	// Fields how many failing fields.
	Examples, Fields int
	// Since keeps the failing fields' errors recorded at or after it; zero
	// means all time.
	Since time.Time
	// AllBatches lists the failing fields of every batch rather than of
	// the batch reported.
	AllBatches bool
}

// chooseBatch returns batchID when it is not empty, else the newest batch
// with messages, of the ingested file source when that is not empty and
// of schema schemaID when that is not empty. The error says so when there
// is none.
func chooseBatch(ctx context.Context, st *store.Store, batchID, source, schemaID string) (string, error) {
	if batchID != "" {
		return batchID, nil
	}
	id, err := st.BatchLatest(ctx, st.Pool, source, schemaID)
	if source == "" || !errors.Is(err, store.ErrNotFound) {
		return id, notFound(err, source, schemaID, nil)
	}
	// The batch keeps the file's path as it was typed at ingest: among
	// the files of that name, take the one that is the same path written
	// another way (./a, a//b, absolute from here), else name them.
	named, lerr := st.BatchSourcesNamed(ctx, st.Pool, filepath.Base(source), 20)
	if lerr != nil {
		return "", lerr
	}
	for _, name := range named {
		if samePath(name, source) {
			return st.BatchLatest(ctx, st.Pool, name, schemaID)
		}
	}
	return "", notFound(err, source, schemaID, named)
}

// samePath reports whether the file paths a and b name the same file:
// equal once cleaned, or once made absolute from the current directory.
func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// notFound turns chooseBatch's ErrNotFound into an error that says why
// there may be no batch, or names the files of the same name that have
// batches; other errors pass as they are.
func notFound(err error, source, schemaID string, named []string) error {
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if len(named) > 0 {
		return fmt.Errorf("no batch%s was ingested from a file written %q; batches with messages were ingested from a file of that name written %s: give -source exactly so (or -batch)",
			words.Optional(" of schema %s", schemaID), source, strings.Join(quoteAll(named), ", "))
	}
	return fmt.Errorf("no batch%s%s has messages of its own: none was ingested, or each one's lines were all duplicates "+
		"of messages an earlier batch stored (report that batch with -batch, or -source its file)",
		words.Optional(" ingested from %s", source), words.Optional(" of schema %s", schemaID))
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// printReport writes a batch's report: counts, cost, examples and the
// fields that fail most in the batch (in every batch with AllBatches).
// Every figure is read in one snapshot (store.ReadSnapshot), so the lines
// of a batch that workers are still deciding agree with each other: the
// failed runs and the open triage items, the repaired runs and the
// accounting's. It returns an error naming the batch when there is no
// such batch, or no batch with messages.
func printReport(ctx context.Context, w io.Writer, st *store.Store, p reportParams) error {
	return st.ReadSnapshot(ctx, func(db store.DBTX) error { return writeReport(ctx, w, st, db, p) })
}

// reportRead, when set (by tests), runs after the report has read the
// batch's summary and before it reads anything else.
var reportRead func()

// writeReport is printReport's body, every query on db.
func writeReport(ctx context.Context, w io.Writer, st *store.Store, db store.DBTX, p reportParams) error {
	examples, fields := p.Examples, p.Fields
	batchID, err := chooseBatch(ctx, st, p.BatchID, p.Source, p.SchemaID)
	if err != nil {
		return err
	}
	bs, err := st.BatchSummary(ctx, db, batchID)
	if reportRead != nil {
		reportRead()
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("there is no batch %q", batchID)
	}
	if err != nil {
		return err
	}
	noun := "messages"
	if bs.Messages == 1 {
		noun = "message"
	}
	fmt.Fprintf(w, "Batch %s: %d %s\n", bs.BatchID, bs.Messages, noun)
	if reruns := bs.Runs - bs.Messages; reruns > 0 {
		fmt.Fprintf(w, "  %d runs: %s of a message re-run in this batch; each message is counted by its latest run, except where a line says \"every run\"\n",
			bs.Runs, plural(reruns, "one more run", "more runs"))
	}
	// What the figures describe, as eval says it: a batch run on the LLM
	// simulator has simulator figures, not a model's.
	v, err := st.EvalBatchVersions(ctx, db, batchID)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  %s\n", eval.BatchOf(batchID, v).Provenance())
	fmt.Fprintf(w, "  succeeded %d (valid at first pass), repaired %d (valid after the one repair), held %d (valid, held for review: no result until approved), failed %d (sent to triage), queued %d\n",
		bs.Succeeded, bs.Repaired, bs.Held, bs.Failed, bs.Queued)
	fmt.Fprintf(w, "  check: succeeded + repaired + held + failed + queued = %d of %d messages\n",
		bs.Succeeded+bs.Repaired+bs.Held+bs.Failed+bs.Queued, bs.Messages)

	if bs.Erased > 0 {
		fmt.Fprintf(w, "  erased: %d of the messages' text and results (retention), so their results are not shown below\n", bs.Erased)
	}
	tc, err := st.TriageQueueCounts(ctx, db, store.TriageFilter{BatchID: batchID, Status: store.TriageAnyStatus})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  triage items (every run): %d open, %d approved, %d rejected, %d sent back for a re-run\n",
		tc.ByStatus[store.TriageOpen], tc.ByStatus[store.TriageApproved], tc.ByStatus[store.TriageRejected], tc.ByStatus[store.TriageRerun])
	hc, err := st.TriageQueueCounts(ctx, db, store.TriageFilter{BatchID: batchID, Status: store.TriageAnyStatus, Kind: store.TriageReasonHeld})
	if err != nil {
		return err
	}
	if hc.Total > 0 {
		fmt.Fprintf(w, "    of them held for review: %d open, %d approved, %d rejected, %d sent back for a re-run\n",
			hc.ByStatus[store.TriageOpen], hc.ByStatus[store.TriageApproved], hc.ByStatus[store.TriageRejected], hc.ByStatus[store.TriageRerun])
	}
	fmt.Fprintf(w, "  LLM (every run): %d calls (%d with estimated tokens), %d prompt (%d cached) + %d completion tokens, cost $%.6f\n",
		bs.LLMCalls, bs.UsageEstimatedCalls, bs.PromptTokens, bs.CachedTokens, bs.CompletionTokens, bs.CostUSD)

	acc, err := st.BatchAccountingGet(ctx, db, batchID)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  first-pass failures %d (%.1f%% of messages); repair calls (every run) %d; repaired %d (%.1f%% of repair calls); final failures %d\n",
		acc.FirstPassFailures, pct(acc.FirstPassFailures, acc.Runs), acc.RepairCalls, acc.Repaired, pct(acc.Repaired, acc.RepairCalls), acc.Failed)
	if acc.Held > 0 {
		fmt.Fprintf(w, "  held for review %d (%d valid after the one repair, not counted as repaired above); see the triage items of kind held\n",
			acc.Held, acc.HeldAfterRepair)
	}
	share := 0.0
	if acc.CostUSD > 0 {
		share = 100 * acc.RepairCostUSD / acc.CostUSD
	}
	fmt.Fprintf(w, "  repair calls (every run) cost $%.6f, %.2f%% of the batch; %.1f completion tokens per repair\n",
		acc.RepairCostUSD, share, acc.CompletionTokensPerRepair)

	if examples < 1 {
		examples = 1
	}
	ex, err := st.ExtractionList(ctx, db, store.ExtractionListParams{BatchID: batchID, Limit: examples})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nExample results (%d shown):\n", len(ex))
	for _, e := range ex {
		fmt.Fprintf(w, "  %s run %d [%s, schema %s v%s]\n    %s\n", e.ExternalID, e.RunNo, e.Outcome, e.SchemaID, e.SchemaVersion, e.Data)
	}
	items, err := st.TriageItemList(ctx, db, store.TriageItemListParams{BatchID: batchID, Limit: examples})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nTriage items (%d shown):\n", len(items))
	for _, it := range items {
		fmt.Fprintf(w, "  #%d %s run %d: reason %s\n", it.ID, it.ExternalID, it.RunNo, it.Reason)
		for _, e := range it.Errors {
			fmt.Fprintf(w, "    %s [%s/%s]\n", e.Error(), e.Kind, e.Keyword)
		}
	}
	ffp := store.FailingFieldListParams{Limit: fields, Since: p.Since, BatchID: batchID}
	of := "of batch " + batchID + " (every run)"
	if p.AllBatches {
		ffp.BatchID, of = "", "of all batches and schemas"
	}
	ff, err := st.FailingFieldList(ctx, db, ffp)
	if err != nil {
		return err
	}
	window := ""
	if !p.Since.IsZero() {
		window = " since " + p.Since.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "\nFailing fields %s%s (failing_fields_in, top %d):\n", of, window, fields)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  schema\tfield\tkind\terrors\truns\trepaired\tfailed")
	for _, f := range ff {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%d\n", f.SchemaID, orRoot(f.PathPattern), f.Kind, f.Errors, f.Runs, f.RunsRepaired, f.RunsFailed)
	}
	tw.Flush()
	if len(ff) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	return nil
}

// plural returns "one" for n == 1, else "n many".
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func orRoot(p string) string {
	if strings.TrimSpace(p) == "" {
		return "/"
	}
	return p
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}
