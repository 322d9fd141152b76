package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// BenchmarkOutcomeWriteOutbox writes outcomes as the worker's committer
// does (store.RunWriteBatch, 64 outcomes a transaction), with the results
// outbox off and on, so the outbox's cost per message is the difference
// of the two in one run: one more row per outcome (in the outcome's own
// statement), two more statements per transaction (the batch lock and
// check, in the same round trip), and once per batch its summary and
// batch.done row. Report: µs/message (wall, Postgres included) and
// outbox_rows/message.
//
//	go test -run '^$' -bench BenchmarkOutcomeWriteOutbox -benchtime 20x ./store/
func BenchmarkOutcomeWriteOutbox(b *testing.B) {
	const perOp, perBatch = 64, 640
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("outbox=%t", on), func(b *testing.B) {
			ctx := context.Background()
			st := storetest.NewStore(b)
			if err := st.ResultsOutboxEnable(ctx, st.Pool, on); err != nil {
				b.Fatal(err)
			}
			var runs []store.Run
			n, took := 0, time.Duration(0)
			for b.Loop() {
				if len(runs) < perOp {
					b.StopTimer()
					batch := fmt.Sprintf("bench-%t-%d", on, n)
					if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket"}); err != nil {
						b.Fatal(err)
					}
					runs = runs[:0]
					for range perBatch {
						id := uniqueID("m")
						res, err := st.MessageIngest(ctx, st.Pool, ingestParams(batch, id, "my parcel never arrived, order "+id))
						if err != nil {
							b.Fatal(err)
						}
						runs = append(runs, res.Run)
					}
					b.StartTimer()
				}
				ps := make([]store.RunOutcomeParams, perOp)
				for i := range ps {
					ps[i] = succeededOutcome(runs[i])
				}
				runs = runs[perOp:]
				start := time.Now()
				for i, err := range st.RunOutcomeInsertMany(ctx, ps) {
					if err != nil {
						b.Fatalf("outcome %d: %v", i, err)
					}
				}
				took += time.Since(start)
				n += perOp
			}
			var rows int
			if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM results_outbox`).Scan(&rows); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(took.Microseconds())/float64(n), "µs/message")
			b.ReportMetric(float64(rows)/float64(n), "outbox_rows/message")
		})
	}
}
