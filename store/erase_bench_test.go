package store_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// seedFinished stores n messages received 100 days ago, each with a
// succeeded run, two LLM calls, a result and an audit entry, as a purge
// finds them. Written in a few set-based statements.
func seedFinished(ctx context.Context, b *testing.B, st *store.Store, batch string, n int) {
	b.Helper()
	stmts := []string{
		`INSERT INTO messages (source, external_id, body, content_hash, batch_id, received_at)
		 SELECT 'bench', $1 || '-' || i, repeat('My parcel never arrived, order 48213. ', 20), '\x01', $1, now() - interval '100 days'
		 FROM generate_series(1, $2) i`,
		`INSERT INTO runs (message_id, run_no, batch_id, schema_id, status, dedup_id, finished_at)
		 SELECT id, 1, $1, 'support_ticket', 'succeeded', 'd-' || id, now() FROM messages WHERE batch_id = $1 AND $2 > 0`,
		`INSERT INTO llm_calls (message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode, reply)
		 SELECT id, 1, a, CASE a WHEN 1 THEN 'extract' ELSE 'repair' END, 'sim-1', 'v1', 'support_ticket', '1', 'tools', repeat('{"order_id":"48213"}', 10)
		 FROM messages, generate_series(1, 2) a WHERE batch_id = $1 AND $2 > 0`,
		`INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data)
		 SELECT id, 1, 'support_ticket', '1', 'succeeded', '{"order_id":"48213"}' FROM messages WHERE batch_id = $1 AND $2 > 0`,
		`INSERT INTO audit_log (actor, via, action, message_id, reason, after)
		 SELECT 'alice', 'ui', 'approve', id, 'checked', '{"order_id":"48213"}' FROM messages WHERE batch_id = $1 AND $2 > 0`,
	}
	for _, s := range stmts {
		if _, err := st.Pool.Exec(ctx, s, batch, n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMessagesPurge erases 2,000 finished messages per op, in chunks
// of 500, with history (BENCH_PURGE_HISTORY, default 20,000) already
// erased ones and their audit entries beside them, vacuumed. Report:
// messages/s.
//
//	go test -run '^$' -bench BenchmarkMessagesPurge -benchtime 5x ./store/
func BenchmarkMessagesPurge(b *testing.B) {
	ctx := context.Background()
	st := storetest.NewStore(b)
	const perOp = 2000
	p := store.PurgeParams{ErasureParams: store.ErasureParams{Actor: "retention", Via: store.ViaCLI},
		ReceivedBefore: time.Now().Add(-90 * 24 * time.Hour)}
	// History: earlier purges' erased messages and audit entries.
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "history", SchemaID: "support_ticket"}); err != nil {
		b.Fatal(err)
	}
	history := 20000
	if v, err := strconv.Atoi(os.Getenv("BENCH_PURGE_HISTORY")); err == nil && v >= 0 {
		history = v
	}
	seedFinished(ctx, b, st, "history", history)
	if _, err := st.MessagesPurge(ctx, p); err != nil {
		b.Fatal(err)
	}
	// As autovacuum would have, between nightly purges.
	if _, err := st.Pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	erased := 0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		batch := "bench-" + time.Now().Format("150405.000000")
		if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket"}); err != nil {
			b.Fatal(err)
		}
		seedFinished(ctx, b, st, batch, perOp)
		b.StartTimer()
		res, err := st.MessagesPurge(ctx, p)
		if err != nil || res.Erased != perOp {
			b.Fatalf("purge = %+v, %v; want %d erased", res, err, perOp)
		}
		erased += res.Erased
	}
	b.ReportMetric(float64(erased)/b.Elapsed().Seconds(), "messages/s")
}
