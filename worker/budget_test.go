package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestConnectionBudget runs more worker replicas against a private
// Postgres than fit its max_connections with the default pools (6 × 16
// against 24), each replica's pool sized by the connection budget
// (config.Postgres.PoolSize): every message gets its outcome, the server
// never refuses a connection ("too many clients"), no run is put back
// and no provider call goes unbooked. The replicas' pools run full (a
// run waits for a connection), so without the budget they would have
// opened more.
func TestConnectionBudget(t *testing.T) {
	t.Parallel()
	const maxConnections, replicas = 24, 6
	if replicas*store.DefaultMaxConns <= maxConnections {
		t.Fatalf("the replicas' default pools (%d) fit max_connections %d: the test proves nothing", replicas*store.DefaultMaxConns, maxConnections)
	}
	budget := config.Postgres{MaxConnections: maxConnections, Reserve: 4,
		Pools: map[string]config.PoolShare{"worker": {Share: 100, MaxReplicas: replicas}}}
	pool, err := budget.PoolSize("worker")
	if err != nil {
		t.Fatal(err)
	}
	if total := budget.Total(); total > maxConnections || pool != 3 {
		t.Fatalf("budget: pool %d per replica, %d in all; want 3, at most %d", pool, total, maxConnections)
	}

	pg := storetest.NewPostgres(t, fmt.Sprintf("max_connections=%d", maxConnections))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pg.URL("extractq")
	if err := store.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	// The test's own store (migrations, ingest, checks) lives in the
	// reserve, as migrate and ingest would.
	st, err := store.OpenWith(ctx, url, log, store.OpenOptions{MaxConns: budget.Reserve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := store.Migrate(ctx, st.Pool, log); err != nil {
		t.Fatal(err)
	}

	q := queuetest.NewStream(t)
	var bundles []*testBundle
	var stores []*store.Store
	for i := range replicas {
		ws, err := store.OpenWith(ctx, url, log, store.OpenOptions{MaxConns: pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ws.Close)
		stores = append(stores, ws)
		bundles = append(bundles, setup(t, setupOpts{st: st, workerSt: ws, q: q, concurrency: 8,
			sim: config.Simulator{Seed: int64(20 + i), InvalidJSONRate: 0.1, MissingRequiredRate: 0.1, RepairFixRate: 0.6}}))
	}

	// The sample's first 200 messages.
	all, err := os.ReadFile("../testdata/abcd/messages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfterN(string(all), "\n", 201)
	sum := bundles[0].ingestReader(t, strings.NewReader(strings.Join(lines[:200], "")))
	if sum.Published != 200 || sum.Rejected != 0 {
		t.Fatalf("ingest %+v", sum)
	}
	bs := bundles[0].wait(t, sum.BatchID)
	if bs.Queued != 0 || bs.Succeeded+bs.Repaired+bs.Failed != sum.Published {
		t.Fatalf("outcomes %+v do not add up to %d published", bs, sum.Published)
	}
	for _, b := range bundles {
		b.stop()
	}

	var served, waited int64
	for i, b := range bundles {
		served += b.calls.Load()
		if n := b.metric(t, "extractq_run_naks_total"); n != 0 {
			t.Errorf("replica %d put %v runs back; want none", i, n)
		}
	}
	if got := int64(bundles[0].count(t, `SELECT count(*) FROM llm_calls`)); got != served {
		t.Errorf("llm_calls rows %d, simulator served %d: calls not booked", got, served)
	}
	if n := bundles[0].count(t, `SELECT count(*) FROM failure_events WHERE kind IN ('delivery', 'transport')`); n != 0 {
		t.Errorf("%d delivery or transport failures; want none", n)
	}
	for _, ws := range stores {
		stat := ws.Pool.Stat()
		if int(stat.MaxConns()) != pool {
			t.Errorf("a replica's pool allows %d connections; want the budget's %d", stat.MaxConns(), pool)
		}
		waited += stat.EmptyAcquireCount()
	}
	if waited == 0 {
		t.Errorf("no run ever waited for a connection: the pools never ran full, so the budget was not tested")
	}

	// At their peak every replica holds its whole pool, and the reserve is
	// in use: the budget's pools fit the server, the default ones would
	// not.
	if err := holdAll(ctx, append(stores, st)); err != nil {
		t.Errorf("every budgeted pool full at once: %v", err)
	}
	if log := pg.Log(); strings.Contains(log, "too many clients") || strings.Contains(log, "remaining connection slots") {
		t.Errorf("the server refused connections:\n%s", log)
	}
	for _, ws := range append(stores, st) {
		ws.Close()
	}
	var defaults []*store.Store
	for range replicas {
		ds, err := store.Open(ctx, url, log)
		if err != nil {
			t.Fatal(err)
		}
		defaults = append(defaults, ds)
	}
	err = holdAll(ctx, defaults)
	for _, ds := range defaults {
		ds.Close()
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "53300" {
		t.Errorf("%d default pools full at once: %v; want the server to refuse with too many clients (53300)", replicas, err)
	}
	t.Logf("%d messages, %d replicas × %d connections, %d acquires waited for a connection, %d calls", sum.Published, replicas, pool, waited, served)
}

// holdAll acquires every connection each store's pool allows, all at
// once, then releases them; the error is the first acquire's that failed.
func holdAll(ctx context.Context, stores []*store.Store) error {
	var held []*pgxpool.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for _, st := range stores {
		for range st.Pool.Config().MaxConns {
			c, err := st.Pool.Acquire(ctx)
			if err != nil {
				return err
			}
			held = append(held, c)
		}
	}
	return nil
}
