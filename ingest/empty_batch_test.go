package ingest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// An ingest into which nothing new got leaves no batch row: one whose
// every line is a duplicate, and one that stopped before its first
// message was stored. Before, both left an empty batch behind.
func TestRunLeavesNoEmptyBatch(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	in := ingesttest.GoodLines(3)
	if sum, err := e.Ingest(t, strings.NewReader(in), nil); err != nil || sum.Published != 3 {
		t.Fatalf("first ingest: %+v, %v", sum, err)
	}
	batches := func() int { return e.CountSQL(t, `SELECT count(*) FROM batches`) }

	// All duplicates (still queued: a wait covers them).
	sum, err := e.Ingest(t, strings.NewReader(in), nil)
	if err != nil || sum.Duplicates != 3 || sum.BatchID != "" || len(sum.Waiting) != 3 {
		t.Errorf("all duplicates: %+v, %v; want 3 duplicates waited for, no batch", sum, err)
	}
	rep := ingest.NewReport(sum)
	if err := ingest.AddOutcomes(t.Context(), e.Store, sum, &rep); err != nil || rep.Queued != 3 || rep.QueuedDuplicates != 3 {
		t.Errorf("all duplicates: report %+v, %v; want the 3 duplicates queued", rep, err)
	}
	if n := batches(); n != 1 {
		t.Errorf("%d batches after an all-duplicate ingest, want 1", n)
	}

	// Stopped (its context cancelled) after a duplicate, before anything
	// of its own was stored.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ing, err := ingest.New(ingest.Config{Store: e.Store, Publisher: e.Pub, SchemaID: ingesttest.Schema, MaxTextBytes: ingesttest.MaxText,
		Progress: func(int) { cancel() }})
	if err != nil {
		t.Fatal(err)
	}
	sum, err = ing.Run(ctx, strings.NewReader(in+`{"id":"new-1","text":"never stored"}`+"\n"))
	if !errors.Is(err, context.Canceled) || sum.Duplicates != 1 || sum.BatchID != "" {
		t.Errorf("stopped: %+v, %v; want stopped after 1 duplicate, no batch", sum, err)
	}
	if n := batches(); n != 1 {
		t.Errorf("%d batches after an ingest stopped before storing anything, want 1", n)
	}
}
