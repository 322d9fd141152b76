package worker_test

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/worker"
)

// QA sampling at 5%, stratified by intent with two intents sampled at
// 50%: the runs drawn are exactly the successes whose deterministic draw
// is below their committed record's stratum share, each once, with the
// cohort of its deciding call; failed and held runs are never drawn.
// Both commit paths: each outcome in its own transaction, and outcomes
// sharing transactions (store.RunWriteBatch).
func TestQASampling(t *testing.T) {
	t.Parallel()
	qa := &config.QA{Share: 0.05, StratifyBy: "/intent", Seed: "test",
		Strata: map[string]float64{"recover_password": 0.5, "recover_username": 0.5}}
	for _, tc := range []struct {
		name  string
		batch int
	}{{"OwnTransaction", 1}, {"SharedTransactions", 16}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{sim: config.Default().Simulator, qa: qa, batch: tc.batch, concurrency: 8})
			sum := b.ingestReader(t, strings.NewReader(sampleLines(t, 400)))
			b.wait(t, sum.BatchID)
			ctx := context.Background()

			type run struct {
				id     int64
				status string
				intent string
			}
			rows, err := b.st.Pool.Query(ctx, `
SELECT r.message_id, r.status, coalesce(e.data->>'intent', '')
FROM runs r LEFT JOIN extractions e ON e.message_id = r.message_id AND e.run_no = r.run_no
WHERE r.batch_id = $1`, sum.BatchID)
			if err != nil {
				t.Fatal(err)
			}
			var runs []run
			for rows.Next() {
				var r run
				if err := rows.Scan(&r.id, &r.status, &r.intent); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, r)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			want := map[int64]float64{} // message id: share
			successes, boosted := 0, 0
			for _, r := range runs {
				if r.status != store.RunSucceeded && r.status != store.RunRepaired {
					continue
				}
				successes++
				share := qa.Share
				if s, ok := qa.Strata[r.intent]; ok {
					share = s
					boosted++
				}
				if worker.QADraw(qa.Seed, r.id, 1) < share {
					want[r.id] = share
				}
			}
			samples, err := b.st.QASampleList(ctx, b.st.Pool, store.QASampleListParams{SchemaID: "customer_message", Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			got := map[int64]store.QASample{}
			for _, s := range samples {
				if _, twice := got[s.MessageID]; twice {
					t.Fatalf("message %d sampled twice", s.MessageID)
				}
				got[s.MessageID] = s
			}
			for id, share := range want {
				s, ok := got[id]
				switch {
				case !ok:
					t.Errorf("message %d: a success drawn below its share %v is not in the QA queue", id, share)
				case s.Share != share || s.Status != store.QAOpen || s.StratifyBy != "/intent" || s.RunNo != 1:
					t.Errorf("message %d: sample %+v, want share %v, open, stratified by /intent", id, s, share)
				case s.Model == "" || s.PromptVersion != "extract.v1" || s.SchemaVersion != b.schema.Version:
					t.Errorf("message %d: sample cohort %q %q %q", id, s.SchemaVersion, s.PromptVersion, s.Model)
				}
			}
			for id := range got {
				if _, ok := want[id]; !ok {
					t.Errorf("message %d is in the QA queue but is not a success drawn below its share", id)
				}
			}
			if successes < 200 || boosted < 20 || len(want) < 10 {
				t.Fatalf("%d successes, %d in the 50%% strata, %d drawn: too few to test the sampling", successes, boosted, len(want))
			}
			t.Logf("%d runs, %d successes (%d in the 50%% strata), %d sampled", len(runs), successes, boosted, len(got))
		})
	}
}

// sampleLines returns the first n lines of the bundled sample.
func sampleLines(t *testing.T, n int) string {
	t.Helper()
	f, err := os.Open("../testdata/abcd/messages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for i := 0; i < n && sc.Scan(); i++ {
		sb.Write(sc.Bytes())
		sb.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}
