package worker_test

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/worker"
)

// testBundle is one private pipeline: its own Postgres schema, stream,
// simulator and worker.
type testBundle struct {
	st      *store.Store
	q       *queuetest.Bundle
	schema  *pipeline.Schema
	calls   *atomic.Int64 // chat completion requests the simulator served
	pub     *queue.Publisher
	relay   *relay.Relay
	workCfg config.Worker
	w       *worker.Worker
	reg     *prometheus.Registry
	// stop stops the worker (as SIGTERM does) and waits for RunService to
	// return; the test's cleanup calls it too.
	stop func()
}

type setupOpts struct {
	sim        config.Simulator
	handler    http.Handler // replaces the simulator when set
	maxDeliver int
	repair     string // default regenerate
	mode       string // default response_format
	maxTokens  int    // per-message token budget; default the configuration's
	contextWin int    // model context in tokens; default the configuration's
	batch      int    // outcomes per transaction; default 1
	// transport, when set, puts a provider.Transport with these settings
	// under the LLM client, as the worker runs in production.
	transport *config.Provider

	// st is the store; default a new one (storetest.NewStore).
	st *store.Store
	// workerSt, when set, is the worker's own store, on st's schema (such
	// as through a proxy the test cuts); the test's own reads and ingest
	// use st.
	workerSt *store.Store
	// reconcileEvery and reconcileGrace run the relay's reconciler
	// (ServiceConfig); default off.
	reconcileEvery, reconcileGrace time.Duration
	// ready, when set, is waited on before each fetch, before the
	// worker's own Ready: a test's way to hold fetching back.
	ready func(ctx context.Context) error
	// q is the stream; default a new one (queuetest.NewStream). Replicas
	// of one deployment share it.
	q *queuetest.Bundle
	// concurrency is the runs in flight; default 4.
	concurrency int
	// qa is the schema's QA sampling; default none.
	qa *config.QA
}

// customerSchema loads the customer_message schema once per test binary.
// A compiled *pipeline.Schema is read-only, and every handler of a worker
// shares one, as cmd/worker's do; compiling its rules cost about 25 ms of
// CPU time under the race detector in every setup and worker start.
var customerSchema = sync.OnceValues(func() (*pipeline.Schema, error) {
	return pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
})

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))

	b := &testBundle{st: o.st, q: o.q, calls: new(atomic.Int64), reg: prometheus.NewRegistry()}
	if b.q == nil {
		b.q = queuetest.NewStream(t)
	}
	if b.st == nil {
		b.st = storetest.NewStore(t)
	}
	h := o.handler
	if h == nil {
		h = llmsim.New(o.sim, log)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			b.calls.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	cfg := config.Default()
	var err error
	b.schema, err = customerSchema()
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	oc := openai.DefaultConfig("test")
	oc.BaseURL = srv.URL + "/v1"
	if o.transport != nil {
		oc.HTTPClient = provider.New(*o.transport, nil, nil, log).Client()
	}
	price := cfg.Prices.Models[cfg.LLM.Model]
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
		Model: cfg.LLM.Model, RequestMode: o.mode, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
		ContextWindowTokens: cmp.Or(o.contextWin, cfg.LLM.ContextWindowTokens),
		Budget:              pipeline.Budget{MaxTokens: cmp.Or(o.maxTokens, cfg.Budget.MaxTokens), MaxCostUSD: cfg.Budget.MaxCostUSD},
		Price:               pipeline.Price{InputPerMTok: price.InputPerMTok, CachedInputPerMTok: price.CachedInputPerMTok, OutputPerMTok: price.OutputPerMTok},
		PriceVersion:        cfg.Prices.Version, Logger: log,
	})
	wst := cmp.Or(o.workerSt, b.st)
	w, err := worker.New(worker.Config{
		Store: wst, Extractor: ext, Model: cfg.LLM.Model, NakDelay: 20 * time.Millisecond, MaxNakDelay: 50 * time.Millisecond,
		Schemas:     map[string]worker.SchemaEntry{"customer_message": {Schema: b.schema, Prompt: prompt, Repair: cmp.Or(o.repair, pipeline.RepairRegenerate), QA: o.qa}},
		CommitBatch: o.batch, Metrics: worker.NewMetrics(b.reg), Logger: log,
		Announcer: queue.NewAnnouncer(b.q.Conn, b.q.NATS),
	})
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	b.workCfg = cfg.Worker
	b.workCfg.Concurrency = cmp.Or(o.concurrency, 4)
	b.workCfg.AckWait = 5 * time.Second
	if o.maxDeliver > 0 {
		b.workCfg.MaxDeliver = o.maxDeliver
	}
	cons, err := queue.EnsureConsumer(ctx, b.q.JS, b.q.NATS, b.workCfg)
	if err != nil {
		t.Fatal(err)
	}
	b.pub = queue.NewPublisher(b.q.JS, b.q.NATS)
	b.relay, err = relay.New(relay.Config{Store: wst, Publisher: b.pub, Metrics: relay.NewMetrics(b.reg), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var ready func(ctx context.Context) (queue.Admit, error)
	if o.ready != nil {
		ready = func(ctx context.Context) (queue.Admit, error) {
			if err := o.ready(ctx); err != nil {
				return queue.AdmitAll, err
			}
			return w.Ready(ctx)
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- worker.RunService(ctx, worker.ServiceConfig{
			Worker: w, Store: wst, Conn: b.q.Conn, Consumer: cons, Publisher: b.pub, Relay: b.relay, Ready: ready,
			JS: b.q.JS, NATS: b.q.NATS,
			Concurrency: b.workCfg.Concurrency, ShutdownGrace: 2 * time.Second, SweepEvery: -1,
			ReconcileEvery: cmp.Or(o.reconcileEvery, -1), ReconcileGrace: o.reconcileGrace, Logger: log,
		})
	}()
	b.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunService: %v", err)
		}
	})
	t.Cleanup(b.stop)
	return b
}

// ingestFile ingests path as one batch and returns its summary.
func (b *testBundle) ingestFile(t *testing.T, path string) ingest.Summary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return b.ingestReader(t, f)
}

func (b *testBundle) ingestReader(t *testing.T, r interface{ Read([]byte) (int, error) }) ingest.Summary {
	t.Helper()
	in, err := ingest.New(ingest.Config{Store: b.st, Publisher: b.pub, Relay: b.relay, SchemaID: "customer_message", MaxTextBytes: 32768})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := in.Run(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// wait polls the batch until no run is queued.
func (b *testBundle) wait(t *testing.T, batchID string) store.BatchSummary {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		bs, err := b.st.BatchSummary(context.Background(), b.st.Pool, batchID)
		if err != nil {
			t.Fatal(err)
		}
		if bs.Done() {
			return bs
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s not done: %+v", batchID, bs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.st.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestPipelineEndToEnd(t *testing.T) {
	t.Parallel()

	t.Run("RealSampleAddsUp", func(t *testing.T) {
		t.Parallel()
		// Fault rates far above the demo's, so every path is taken.
		b := setup(t, setupOpts{batch: 8, sim: config.Simulator{Seed: 7, InvalidJSONRate: 0.1, FencedRate: 0.1, ProseRate: 0.1,
			WrongTypeRate: 0.1, MissingRequiredRate: 0.1, UngroundedRate: 0.15, TruncatedRate: 0.05, RepairFixRate: 0.75}})
		sum := b.ingestFile(t, "../testdata/abcd/small.jsonl")
		if sum.Published != 40 || sum.Rejected != 0 {
			t.Fatalf("ingest %+v", sum)
		}
		bs := b.wait(t, sum.BatchID)
		if bs.Succeeded+bs.Repaired+bs.Failed != sum.Published {
			t.Fatalf("outcomes %+v do not add up to %d published", bs, sum.Published)
		}
		if bs.Succeeded == 0 || bs.Repaired == 0 || bs.Failed == 0 {
			t.Fatalf("want every outcome at these fault rates: %+v", bs)
		}
		// Every call the simulator served is recorded, and no more.
		if got := int64(b.count(t, `SELECT count(*) FROM llm_calls`)); got != b.calls.Load() || got != int64(bs.LLMCalls) {
			t.Fatalf("llm_calls rows %d, summary %d, simulator served %d", got, bs.LLMCalls, b.calls.Load())
		}
		// One repair at most per run.
		if n := b.count(t, `SELECT count(*) FROM (SELECT 1 FROM llm_calls GROUP BY message_id, run_no HAVING count(*) > 2) x`); n != 0 {
			t.Fatalf("%d runs with more than two calls", n)
		}

		// Every stored result validates against its schema now.
		exts, err := b.st.ExtractionList(context.Background(), b.st.Pool, store.ExtractionListParams{BatchID: sum.BatchID})
		if err != nil {
			t.Fatal(err)
		}
		if len(exts) != bs.Succeeded+bs.Repaired {
			t.Fatalf("%d extractions for %d valid runs", len(exts), bs.Succeeded+bs.Repaired)
		}
		for _, e := range exts {
			rw, err := b.st.RunGetWithMessage(context.Background(), b.st.Pool, store.RunGetParams{MessageID: e.MessageID, RunNo: e.RunNo})
			if err != nil {
				t.Fatal(err)
			}
			inst, err := pipeline.DecodeStrict(e.Data)
			if err != nil {
				t.Fatal(err)
			}
			if errs, _ := b.schema.Validate(inst, rw.Message.Body); len(errs) > 0 {
				t.Errorf("stored result of %s does not validate: %v", e.ExternalID, errs)
			}
		}

		// Every failed run has a triage item with its errors, and every
		// error of every call is a failure event.
		items, err := b.st.TriageItemList(context.Background(), b.st.Pool, store.TriageItemListParams{BatchID: sum.BatchID, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != bs.Failed {
			t.Fatalf("%d triage items for %d failed runs", len(items), bs.Failed)
		}
		for _, it := range items {
			if len(it.Errors) == 0 || it.Reason != string(it.Errors[0].Kind) {
				t.Errorf("triage item %d: reason %q errors %v", it.ID, it.Reason, it.Errors)
			}
		}
		if got, want := b.count(t, `SELECT count(*) FROM failure_events WHERE llm_call_id IS NOT NULL`),
			b.count(t, `SELECT coalesce(sum(error_count), 0) FROM llm_calls`); got != want {
			t.Fatalf("%d failure events for %d call errors", got, want)
		}
		if n := b.count(t, `SELECT count(*) FROM llm_calls WHERE purpose = 'repair'`); n != bs.Repaired+b.count(t,
			`SELECT count(*) FROM triage_items t WHERE EXISTS (SELECT 1 FROM llm_calls c WHERE c.message_id = t.message_id AND c.run_no = t.run_no AND c.attempt = 2)`) {
			t.Fatalf("%d repair calls do not match repaired runs plus failed runs that were repaired", n)
		}

		// The repair accounting adds up from the stored calls.
		acc, err := b.st.BatchAccountingGet(context.Background(), b.st.Pool, sum.BatchID)
		if err != nil {
			t.Fatal(err)
		}
		if acc.Runs != 40 || acc.Repaired != bs.Repaired || acc.Failed != bs.Failed ||
			acc.RepairCalls != b.count(t, `SELECT count(*) FROM llm_calls WHERE purpose = 'repair'`) ||
			acc.FirstPassFailures != bs.Repaired+bs.Failed || acc.RepairCostUSD <= 0 || acc.RepairCostUSD >= acc.CostUSD ||
			math.Abs(acc.CostUSD-bs.CostUSD) > 1e-9 {
			t.Fatalf("accounting %+v vs summary %+v", acc, bs)
		}

		// Ingesting the same file again publishes nothing.
		again := b.ingestFile(t, "../testdata/abcd/small.jsonl")
		if again.Published != 0 || again.Duplicates != 40 {
			t.Fatalf("re-ingest %+v", again)
		}

		// A redelivered run that has an outcome costs no tokens: publish run 1
		// of the first message again under a new dedup key.
		before := b.calls.Load()
		if _, err := b.pub.Publish(context.Background(), "redeliver-test", queue.Envelope{MessageID: exts[0].MessageID, RunNo: 1, BatchID: sum.BatchID, SchemaID: "customer_message"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for b.q.Messages(t) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if b.q.Messages(t) != 0 {
			t.Fatal("redelivered run not acked")
		}
		if b.calls.Load() != before {
			t.Fatalf("redelivery called the LLM %d times", b.calls.Load()-before)
		}
		if got := b.metric(t, "extractq_runs_total"); got != 40 {
			t.Fatalf("extractq_runs_total %v, want 40", got)
		}
		if got := b.metric(t, "extractq_llm_calls_total"); got != float64(bs.LLMCalls) {
			t.Fatalf("extractq_llm_calls_total %v, want %d", got, bs.LLMCalls)
		}
		if got := b.metric(t, "extractq_redeliveries_acked_total"); got != 1 {
			t.Fatalf("extractq_redeliveries_acked_total %v, want 1", got)
		}
	})

	t.Run("ConflictingIDIsRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: config.Simulator{Seed: 1, RepairFixRate: 0.75}})
		first := b.ingestReader(t, strings.NewReader(`{"id":"m1","text":"my order 4821300017 never came"}`+"\n"))
		b.wait(t, first.BatchID)
		second := b.ingestReader(t, strings.NewReader(`{"id":"m1","text":"a different text"}`+"\n"))
		if second.Rejected != 1 || second.Published != 0 || !strings.Contains(second.Errors[0].Reason, "conflict") || second.Errors[0].Line != 1 {
			t.Fatalf("%+v", second)
		}
		if n := b.count(t, `SELECT count(*) FROM messages WHERE external_id = 'm1' AND body = 'my order 4821300017 never came'`); n != 1 {
			t.Fatal("stored message changed")
		}
	})

	t.Run("ProviderFailuresSpendNoDeliveries", func(t *testing.T) {
		t.Parallel()
		// Down for three times the delivery limit, then up: the run is put
		// back each time without spending a delivery, and ends a result.
		const failures = 6
		var served atomic.Int64
		ok := &scriptedLLM{replies: []openai.ChatCompletionChoice{text(record(t, nil))}}
		flaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if served.Add(1) <= failures {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`))
				return
			}
			ok.ServeHTTP(w, r)
		})
		b := setup(t, setupOpts{handler: flaky, maxDeliver: 2})
		sum := b.ingestReader(t, strings.NewReader(`{"id":"m1","text":"`+classText+`"}`+"\n"))
		bs := b.wait(t, sum.BatchID)
		if bs.Succeeded != 1 || bs.Failed != 0 {
			t.Fatalf("%+v, want the run succeeded", bs)
		}
		if n := b.count(t, `SELECT count(*) FROM triage_items`); n != 0 {
			t.Fatalf("%d triage items", n)
		}
		if got := b.calls.Load(); got != failures+1 {
			t.Fatalf("provider called %d times, want %d", got, failures+1)
		}
		if got := b.metric(t, "extractq_run_naks_total"); got != failures {
			t.Fatalf("extractq_run_naks_total %v, want %d", got, failures)
		}
	})

	t.Run("EmptyTextNeverReachesTheModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: config.Simulator{Seed: 1}})
		sum := b.ingestReader(t, strings.NewReader("{\"id\":\"e1\",\"text\":\"  \"}\n{\"id\":\"ok\",\"text\":\"hello, my order is 4821300017\"}\n"))
		if sum.Rejected != 1 || sum.Errors[0].Line != 1 || sum.Published != 1 {
			t.Fatalf("%+v", sum)
		}
		b.wait(t, sum.BatchID)
	})
}

// TestDeliveryFailed: a run that ran out of deliveries without an outcome
// becomes a triage item of kind delivery, once.
func TestDeliveryFailed(t *testing.T) {
	t.Parallel()
	// A provider that is always down keeps the run queued (nak, retry).
	down := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	b := setup(t, setupOpts{handler: down, maxDeliver: 50})
	sum := b.ingestReader(t, strings.NewReader(`{"id":"d1","text":"order 4821300017 is late"}`+"\n"))
	var id int64
	if err := b.st.Pool.QueryRow(context.Background(), `SELECT message_id FROM runs WHERE batch_id = $1`, sum.BatchID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	env := queue.Envelope{MessageID: id, RunNo: 1, BatchID: sum.BatchID, SchemaID: "customer_message"}
	for range 2 {
		if err := b.w.DeliveryFailed(context.Background(), env, 50); err != nil {
			t.Fatal(err)
		}
	}
	items, err := b.st.TriageItemList(context.Background(), b.st.Pool, store.TriageItemListParams{BatchID: sum.BatchID})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Reason != "delivery" || !strings.Contains(items[0].Errors[0].Message, "50 deliveries") {
		t.Fatalf("%+v", items)
	}
	if n := b.count(t, `SELECT count(*) FROM failure_events WHERE kind = 'delivery' AND llm_call_id IS NULL`); n != 1 {
		t.Fatalf("%d delivery failure events", n)
	}
}

// metric sums every series of the counter name.
func (b *testBundle) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
