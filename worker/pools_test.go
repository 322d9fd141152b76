package worker_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/worker"
)

// pool is one worker service of a pool per schema, as cmd/worker runs it
// with -schema: every schema loaded, only its schema's consumer read, on
// its own LLM simulator.
type pool struct {
	calls  *atomic.Int64 // chat completions its simulator served
	health string        // its /readyz address
	stop   func()
}

// readyz returns the pool's /readyz status and body.
func (p *pool) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.health + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// startPool starts a worker service serving cfg.Worker.Schema's consumer.
func startPool(t *testing.T, cfg *config.Config, st *store.Store, q *queuetest.Bundle) *pool {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(cfg.Worker.Schema)
	p := &pool{calls: new(atomic.Int64)}
	url := llmServer(t, llmsim.New(config.Simulator{Seed: 3}, log), p.calls)
	schemas, err := worker.LoadSchemas(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ext := testExtractor(cfg, url, log, nil)
	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{
		Store: st, Extractor: ext, Model: cfg.LLM.Model, Schemas: schemas, Metrics: worker.NewMetrics(reg), Logger: log,
		NakDelay: 20 * time.Millisecond, MaxNakDelay: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := queue.EnsureConsumers(t.Context(), q.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(q.JS, q.NATS)
	rel, err := relay.New(relay.Config{Store: st, Publisher: pub, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.health = ln.Addr().String()
	ln.Close()
	p.stop = runService(t, "pool "+cfg.Worker.Schema, worker.ServiceConfig{HealthAddr: p.health,
		Worker: w, Store: st, Conn: q.Conn, Consumers: cons, AllConsumers: cfg.Consumers(), Publisher: pub, Relay: rel,
		JS: q.JS, NATS: q.NATS, Concurrency: 4, ShutdownGrace: 2 * time.Second, SweepEvery: -1, ReconcileEvery: -1, Logger: log,
	})
	return p
}

// TestSchemaPools: with nats.consumers per_schema, two pools of workers
// run side by side on one stream, each reading only its schema's
// consumer (worker.schema): messages of both schemas ingested each get an
// outcome, every call of a schema's runs made by that schema's pool; with
// one pool stopped, its schema's runs stay queued on its consumer while
// the other pool's finish, and they finish once the pool is back.
func TestSchemaPools(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	base := config.Default()
	base.NATS = q.NATS
	base.NATS.Consumers = config.ConsumersPerSchema
	base.Worker.AckWait = 5 * time.Second
	base.Worker.InProgressEvery = base.Worker.AckWait / 3
	schemaIDs := []string{"customer_message", "return_request"}
	poolCfg := func(schema string) *config.Config {
		c := *base
		c.Worker.Schema = schema
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	pools := map[string]*pool{}
	for _, id := range schemaIDs {
		pools[id] = startPool(t, poolCfg(id), st, q)
	}
	pub := queue.NewPublisher(q.JS, q.NATS)
	rel, err := relay.New(relay.Config{Store: st, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	// ingestBatch ingests n messages of schema as one batch.
	ingestBatch := func(t *testing.T, schema, prefix string, n int) ingest.Summary {
		t.Helper()
		in, err := ingest.New(ingest.Config{Store: st, Publisher: pub, Relay: rel, SchemaID: schema, MaxTextBytes: 32768})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, `{"id":"%s-%d","text":"Hi, I want to return order 4821%d: the blue kettle (SKU KT-20%d) arrived broken. Please refund $34.99 to my card. Thanks, Ana"}`+"\n", prefix, i, i%10, i%10)
		}
		sum, err := in.Run(t.Context(), strings.NewReader(sb.String()))
		if err != nil {
			t.Fatal(err)
		}
		if sum.Published != n {
			t.Fatalf("ingest of %s: %+v", schema, sum)
		}
		return sum
	}
	summary := func(t *testing.T, batch string) store.BatchSummary {
		t.Helper()
		bs, err := st.BatchSummary(context.Background(), st.Pool, batch)
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	waitDone := func(t *testing.T, batch string) store.BatchSummary {
		t.Helper()
		testsignal.Eventually(t, 90*time.Second, "batch "+batch+" done", func() bool { return summary(t, batch).Done() })
		return summary(t, batch)
	}
	count := func(t *testing.T, query string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := st.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}

	const n = 12
	batches := map[string]string{}
	for _, id := range schemaIDs {
		batches[id] = ingestBatch(t, id, "a-"+id, n).BatchID
	}
	for _, id := range schemaIDs {
		bs := waitDone(t, batches[id])
		if bs.Succeeded+bs.Repaired+bs.Held+bs.Failed != n {
			t.Fatalf("schema %s: outcomes %+v do not add up to %d", id, bs, n)
		}
	}
	// Each schema's calls were made by its own pool, and only those.
	for _, id := range schemaIDs {
		calls := count(t, `SELECT count(*) FROM llm_calls c JOIN runs r USING (message_id, run_no) WHERE r.schema_id = $1`, id)
		if served := pools[id].calls.Load(); calls == 0 || calls != served {
			t.Errorf("schema %s: %d calls recorded, its pool's simulator served %d", id, calls, served)
		}
	}

	// One pool stopped: its schema's runs wait on its consumer while the
	// other's finish.
	pools["return_request"].stop()
	waiting := ingestBatch(t, "return_request", "b-return", n).BatchID
	going := ingestBatch(t, "customer_message", "b-customer", n).BatchID
	if bs := waitDone(t, going); bs.Succeeded+bs.Repaired+bs.Held+bs.Failed != n {
		t.Fatalf("customer_message with the other pool stopped: %+v", bs)
	}
	if bs := summary(t, waiting); bs.Queued != n {
		t.Fatalf("return_request with its pool stopped: %+v, want all %d queued", bs, n)
	}
	cons, err := q.JS.Consumer(t.Context(), q.NATS.Stream, q.NATS.SchemaConsumer("return_request").Name)
	if err != nil {
		t.Fatal(err)
	}
	if p := cons.CachedInfo().NumPending; p != n {
		t.Fatalf("consumer %s has %d runs pending, want %d", cons.CachedInfo().Name, p, n)
	}

	// The pool back: they finish.
	pools["return_request"] = startPool(t, poolCfg("return_request"), st, q)
	if bs := waitDone(t, waiting); bs.Succeeded+bs.Repaired+bs.Held+bs.Failed != n {
		t.Fatalf("return_request once its pool is back: %+v", bs)
	}
	if got := count(t, `SELECT count(*) FROM runs WHERE status = 'queued'`); got != 0 {
		t.Fatalf("%d runs still queued", got)
	}

	// A pool whose consumer is deleted under it is not ready, and says
	// which consumer is missing.
	p := pools["return_request"]
	testsignal.Eventually(t, 30*time.Second, "pool return_request ready", func() bool {
		code, _ := p.readyz(t)
		return code == http.StatusOK
	})
	gone := q.NATS.SchemaConsumer("return_request").Name
	if err := q.JS.DeleteConsumer(t.Context(), q.NATS.Stream, gone); err != nil {
		t.Fatal(err)
	}
	if code, body := p.readyz(t); code != http.StatusServiceUnavailable || body != "consumer "+gone+" does not exist" {
		t.Fatalf("/readyz with its consumer deleted: %d %q", code, body)
	}
	if code, body := pools["customer_message"].readyz(t); code != http.StatusOK {
		t.Fatalf("/readyz of the other pool: %d %q", code, body)
	}
}
