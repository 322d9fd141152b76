package relay_test

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkResultsPublish publishes 2,000 outbox rows (result events with
// a small record) per op, as the relay's passes do, on the shared NATS.
// Report: µs/event (wall: Postgres, NATS and the relay) and
// relay_cpu_µs/event (this process: the relay and its NATS client; not
// the servers').
//
//	go test -run '^$' -bench BenchmarkResultsPublish -benchtime 5x ./relay/
func BenchmarkResultsPublish(b *testing.B) {
	const perOp = 2000
	ctx := context.Background()
	rb := setupResultsB(b)
	var wall, cpu time.Duration
	events := 0
	for b.Loop() {
		b.StopTimer()
		if _, err := rb.st.Pool.Exec(ctx, `
WITH m AS (
    INSERT INTO messages (source, external_id, body, content_hash, batch_id)
    SELECT 'bench', gen_random_uuid()::text, 'My parcel never arrived, order 48213.', '\x01', $1
    FROM generate_series(1, $2)
    RETURNING id
)
INSERT INTO results_outbox (type, message_id, run_no, batch_id, schema_id, schema_version, prompt_version, model, outcome, record)
SELECT 'result', id, 1, $1, 'customer_message', '1', 'extract.v1', 'sim-1', 'succeeded',
       '{"intent":"refund","order_id":"48213","tracking_id":"1Z999AA10123456784","refund_amount":"19.99"}'
FROM m`, rb.batch, perOp); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start, c0 := time.Now(), cpuTime(b)
		for n := 0; n < perOp; {
			res, err := rb.rel.Publish(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if res.Events == 0 {
				b.Fatalf("published %d of %d", n, perOp)
			}
			n += res.Events
		}
		wall += time.Since(start)
		cpu += cpuTime(b) - c0
		events += perOp
	}
	b.ReportMetric(float64(wall.Microseconds())/float64(events), "µs/event")
	b.ReportMetric(float64(cpu.Microseconds())/float64(events), "relay_cpu_µs/event")
}
