package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/extractq/extractq/store"
)

// PrintReport writes a batch's report: counts, cost, examples and the
// fields that fail most. An empty batchID means the newest batch with
// messages, of the ingested file source when source is not empty.
func PrintReport(ctx context.Context, w io.Writer, st *store.Store, batchID, source string, examples, fields int) error {
	db := st.Pool
	if batchID == "" {
		id, err := st.BatchLatest(ctx, db, source)
		if err != nil {
			return fmt.Errorf("no batch with messages yet: %w", err)
		}
		batchID = id
	}
	bs, err := st.BatchSummary(ctx, db, batchID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("there is no batch %q", batchID)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Batch %s: %d messages\n", bs.BatchID, bs.Messages)
	fmt.Fprintf(w, "  succeeded %d (valid at first pass), repaired %d (valid after the one repair), failed %d (in triage), queued %d\n",
		bs.Succeeded, bs.Repaired, bs.Failed, bs.Queued)
	fmt.Fprintf(w, "  check: succeeded + repaired + failed + queued = %d of %d messages\n",
		bs.Succeeded+bs.Repaired+bs.Failed+bs.Queued, bs.Messages)
	fmt.Fprintf(w, "  LLM: %d calls, %d prompt + %d completion tokens, cost $%.6f\n",
		bs.LLMCalls, bs.PromptTokens, bs.CompletionTokens, bs.CostUSD)

	acc, err := st.BatchAccountingGet(ctx, db, batchID)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  first-pass failures %d (%.1f%% of runs); repair calls %d; repaired %d (%.1f%% of repair calls); final failures %d\n",
		acc.FirstPassFailures, pct(acc.FirstPassFailures, acc.Runs), acc.RepairCalls, acc.Repaired, pct(acc.Repaired, acc.RepairCalls), acc.Failed)
	share := 0.0
	if acc.CostUSD > 0 {
		share = 100 * acc.RepairCostUSD / acc.CostUSD
	}
	fmt.Fprintf(w, "  repair calls cost $%.6f, %.2f%% of the batch; %.1f completion tokens per repair\n",
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
	ff, err := st.FailingFieldList(ctx, db, store.FailingFieldListParams{Limit: fields})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nFailing fields, all batches (view failing_fields, top %d):\n", fields)
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
