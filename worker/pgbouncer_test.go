package worker_test

import (
	"context"
	"testing"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestThroughPgBouncer runs ingest → worker → results with every database
// access (the migrations, ingest, the worker's writes, the checks below)
// through a private PgBouncer in transaction pooling, its server
// connections fewer than the worker's and ingest's clients: every message
// ends with an outcome, every valid one with a result, and no run is put
// back for a database error.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pgb := storetest.NewPgBouncer(t)
	st := pgb.NewStore(t)
	if st.Pooler() != store.PoolerTransaction || int(st.Pool.Config().ConnConfig.Port) != pgb.Port {
		t.Fatalf("store on port %d (pooler %q); want PgBouncer's %d", st.Pool.Config().ConnConfig.Port, st.Pooler(), pgb.Port)
	}
	// Faults in the replies so that repairs and triage items are written
	// too, each outcome batched with others in one transaction.
	b := setup(t, setupOpts{st: st, batch: 8, sim: config.Simulator{Seed: 11, InvalidJSONRate: 0.1, WrongTypeRate: 0.1,
		MissingRequiredRate: 0.1, UngroundedRate: 0.1, RepairFixRate: 0.6}})

	sum := b.ingestFile(t, "../testdata/abcd/small.jsonl")
	if sum.Published != 40 || sum.Rejected != 0 {
		t.Fatalf("ingest %+v", sum)
	}
	bs := b.wait(t, sum.BatchID)
	if bs.Queued != 0 || bs.Succeeded+bs.Repaired+bs.Failed != sum.Published {
		t.Fatalf("outcomes %+v do not add up to %d published", bs, sum.Published)
	}
	if bs.Succeeded == 0 || bs.Repaired+bs.Failed == 0 {
		t.Fatalf("want successes and repairs or failures at these fault rates: %+v", bs)
	}

	results, err := b.st.BatchResultList(context.Background(), b.st.Pool, store.BatchResultListParams{BatchID: sum.BatchID})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != sum.Published {
		t.Fatalf("%d result rows for %d messages", len(results), sum.Published)
	}
	valid, failed := 0, 0
	for _, r := range results {
		switch r.Status {
		case store.RunSucceeded, store.RunRepaired:
			if r.Result == nil || len(r.Result.Data) == 0 {
				t.Errorf("%s: %s without a result", r.ExternalID, r.Status)
			}
			valid++
		case store.RunFailed:
			if r.Triage == nil || *r.Triage != store.TriageOpen {
				t.Errorf("%s: failed without an open triage item", r.ExternalID)
			}
			failed++
		default:
			t.Errorf("%s: status %s", r.ExternalID, r.Status)
		}
	}
	if valid != bs.Succeeded+bs.Repaired || failed != bs.Failed {
		t.Errorf("%d results and %d failed; summary %+v", valid, failed, bs)
	}
	if got := int64(b.count(t, `SELECT count(*) FROM llm_calls`)); got != b.calls.Load() {
		t.Errorf("llm_calls rows %d, simulator served %d", got, b.calls.Load())
	}
	if n := b.metric(t, "extractq_run_naks_total"); n != 0 {
		t.Errorf("%v runs put back; want none", n)
	}
}
