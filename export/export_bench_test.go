package export_test

import (
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// BenchmarkExportCSV exports one batch whose rows are made by SQL
// (EXPORT_ROWS of them, default 100,000) as CSV into io.Discard, as
// report -results -format csv does, and reports the peak heap in use
// (sampled every 5 ms) beside the time per row: a writer streams a page
// at a time, so the peak must not grow with the rows. The closing note's
// figure: EXPORT_ROWS=1000000 go test -run XXX -bench ExportCSV -benchtime 1x ./export.
func BenchmarkExportCSV(b *testing.B) {
	rows := 100000
	if v, err := strconv.Atoi(os.Getenv("EXPORT_ROWS")); err == nil && v > 0 {
		rows = v
	}
	ctx := context.Background()
	st := storetest.NewStore(b)
	const batch = "b-export-bench"
	for _, q := range []string{
		`INSERT INTO batches (id, schema_id) VALUES ('` + batch + `', 'customer_message')`,
		`INSERT INTO messages (source, external_id, body, content_hash, batch_id)
		 SELECT 'bench', 'm-' || i, 'Where is my order ' || i || '? It was meant to come on Monday, "today", or so they said.',
		        sha256(i::text::bytea), '` + batch + `' FROM generate_series(1, ` + strconv.Itoa(rows) + `) i`,
		`INSERT INTO runs (message_id, run_no, batch_id, schema_id, status, dedup_id, finished_at)
		 SELECT id, 1, batch_id, 'customer_message', 'succeeded', 'run-bench-' || id, now() FROM messages WHERE batch_id = '` + batch + `'`,
		`INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data)
		 SELECT id, 1, 'customer_message', '1', 'succeeded', jsonb_build_object('intent', 'track_order', 'order_id', 'A-' || id,
		        'full_name', 'Ann "Jo", Lee', 'product_names', jsonb_build_array('mug', 'tea ' || id), 'refund_amount', NULL)
		 FROM messages WHERE batch_id = '` + batch + `'`,
	} {
		if _, err := st.Pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	cols, err := export.SchemaColumns(config.Default(), "customer_message")
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	b.ResetTimer()
	for range b.N {
		w := export.NewWriter(io.Discard, export.FormatCSV, cols)
		n := 0
		err := st.BatchResultPages(ctx, st.Pool, store.BatchResultListParams{BatchID: batch}, func(page []store.BatchResult) error {
			for _, r := range page {
				if err := w.Write(r); err != nil {
					return err
				}
			}
			n += len(page)
			return w.Flush()
		})
		if err != nil || n != rows {
			b.Fatalf("exported %d of %d rows: %v", n, rows, err)
		}
	}
	b.StopTimer()
	close(done)
	<-sampled
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(before.HeapInuse)/(1<<20), "heap-before-MB")
	b.ReportMetric(float64(rows), "rows")
}
