package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/worker"
)

// timeScale divides every delivery, breaker and retry time of the shipped
// configuration in the outage tests, so that a 45-minute outage takes 45
// seconds. It is a test knob only: the delivery limit, the breaker's
// failure count, the concurrency and every other setting stay shipped.
const timeScale = 60

// scaledConfig returns the shipped configuration with its times divided by
// timeScale.
func scaledConfig() *config.Config {
	cfg := config.Default()
	for _, d := range []*time.Duration{
		&cfg.Worker.AckWait, &cfg.Worker.InProgressEvery, &cfg.Worker.ShutdownGrace,
		&cfg.Provider.InitialInterval, &cfg.Provider.MaxInterval, &cfg.Provider.MaxElapsedTime,
		&cfg.Provider.BreakerCooldown, &cfg.LLM.Timeout,
	} {
		*d /= timeScale
	}
	return cfg
}

// The worker's own delivery times (worker.Config) and the consumer's panic
// delay (queue.ConsumerOptions), shipped as below and scaled alike.
const (
	shippedNakDelay    = 2 * time.Second
	shippedMaxNakDelay = time.Minute
	shippedPanicDelay  = 5 * time.Second
)

// fault is how a failing provider answers.
type fault struct {
	name   string
	class  provider.ErrorClass // what the Transport makes of it
	status int
	ctype  string
	body   string
}

// The provider failures of the outage tests: each is what a real server or
// the proxy in front of it answers.
var (
	// OpenAI's answer when the account is out of credit.
	faultQuota = fault{name: "QuotaExhausted", class: provider.ClassQuotaExhausted, status: http.StatusTooManyRequests, ctype: "application/json",
		body: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`}
	// A proxy's sign-in page, served with 200.
	faultHTML200 = fault{name: "ProxyPage200", class: provider.ClassMalformed, status: http.StatusOK, ctype: "text/html; charset=utf-8",
		body: "<!DOCTYPE html><html><head><title>Sign in</title></head><body><form action=\"/login\"></form></body></html>"}
	// A gateway's 502 page.
	faultHTML502 = fault{name: "ProxyPage502", class: provider.ClassProxyPage, status: http.StatusBadGateway, ctype: "text/html",
		body: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"}
	// A protocol error: a 200 whose body is not a chat completion.
	faultGarbage = fault{name: "ProtocolError", class: provider.ClassMalformed, status: http.StatusOK, ctype: "application/json",
		body: "{\"id\":\"chatcmpl-\x00\x13\xff\xfe"}
	// OpenAI's answer to a revoked API key.
	faultCredentials = fault{name: "Credentials", class: provider.ClassCredentials, status: http.StatusUnauthorized, ctype: "application/json",
		body: `{"error":{"message":"Incorrect API key provided: sk-proj-********************. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`}
)

// outageLLM answers every chat call with a valid record for classText,
// except while an outage is on: then with its fault. It counts what it
// served.
type outageLLM struct {
	reply []byte

	mu        sync.Mutex
	fault     *fault
	endedAt   time.Time // when the last outage ended
	resumedAt time.Time // the first valid answer after endedAt
	ok        int
	failed    int
}

func newOutageLLM(t *testing.T) *outageLLM {
	b, err := json.Marshal(openai.ChatCompletionResponse{
		ID: "chatcmpl-1", Object: "chat.completion", Model: "extractq-sim-1",
		Choices: []openai.ChatCompletionChoice{text(record(t, nil))},
		Usage:   openai.Usage{PromptTokens: 1000, CompletionTokens: 100, TotalTokens: 1100},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &outageLLM{reply: b}
}

func (s *outageLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.fault
	if f != nil {
		s.failed++
	} else {
		s.ok++
		if !s.endedAt.IsZero() && s.resumedAt.IsZero() {
			s.resumedAt = time.Now()
		}
	}
	s.mu.Unlock()
	if f != nil {
		w.Header().Set("Content-Type", f.ctype)
		w.WriteHeader(f.status)
		w.Write([]byte(f.body))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(s.reply)
}

// start begins an outage with f; stop ends it and returns how many calls
// it answered with f.
func (s *outageLLM) start(f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault, s.failed = &f, 0
}

func (s *outageLLM) stop() (failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault, s.endedAt = nil, time.Now()
	return s.failed
}

// resumed returns how long after the outage's end the first valid answer
// went out, or false when none has yet.
func (s *outageLLM) resumed() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumedAt.IsZero() {
		return 0, false
	}
	return s.resumedAt.Sub(s.endedAt), true
}

// outageBundle is one private pipeline run as cmd/worker runs it, with the
// provider's Transport (retries, breaker) under the extractor, and every
// time scaled by timeScale.
type outageBundle struct {
	cfg    *config.Config
	llmURL string
	st     *store.Store
	q      *queuetest.Bundle
	llm    *outageLLM
	tr     *provider.Transport
	w      *worker.Worker
	reg    *prometheus.Registry
	pub    *queue.Publisher
	log    *zap.Logger
	health string // the worker's /healthz, /readyz and /metrics, once run
}

func newOutageBundle(t *testing.T, llm http.Handler) *outageBundle {
	t.Helper()
	b := &outageBundle{cfg: scaledConfig(), st: storetest.NewStore(t), q: queuetest.NewStream(t), reg: prometheus.NewRegistry(),
		log: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))}
	if o, ok := llm.(*outageLLM); ok {
		b.llm = o
	}
	srv := httptest.NewServer(llm)
	t.Cleanup(srv.Close)
	b.llmURL = srv.URL
	b.cfg.NATS = b.q.NATS
	b.tr = provider.New(b.cfg.Provider, nil, b.reg, b.log)
	b.w = b.newWorker(t)
	b.pub = queue.NewPublisher(b.q.JS, b.cfg.NATS)
	return b
}

// newWorker builds a worker as cmd/worker does, with the bundle's
// Transport (retries, breaker) under its extractor.
func (b *outageBundle) newWorker(t *testing.T) *worker.Worker {
	t.Helper()
	cfg := b.cfg
	schema, err := customerSchema()
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	oc := openai.DefaultConfig("test")
	oc.BaseURL = b.llmURL + "/v1"
	oc.HTTPClient = b.tr.Client()
	price := cfg.Prices.Models[cfg.LLM.Model]
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
		Model: cfg.LLM.Model, RequestMode: cfg.LLM.RequestMode, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
		Provider: cfg.LLM.Provider, ContextWindowTokens: cfg.LLM.ContextWindowTokens, Timeout: cfg.LLM.Timeout,
		Budget: pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
		Price:  pipeline.Price{InputPerMTok: price.InputPerMTok, OutputPerMTok: price.OutputPerMTok}, PriceVersion: cfg.Prices.Version,
		Logger: b.log,
	})
	var m *worker.Metrics
	if b.w == nil {
		m = worker.NewMetrics(b.reg)
	}
	w, err := worker.New(worker.Config{
		Store: b.st, Extractor: ext, Model: cfg.LLM.Model,
		Schemas:  map[string]worker.SchemaEntry{"customer_message": {Schema: schema, Prompt: prompt, Repair: pipeline.RepairRegenerate}},
		NakDelay: shippedNakDelay / timeScale, MaxNakDelay: shippedMaxNakDelay / timeScale,
		CommitBatch: cfg.Worker.CommitBatch, CommitWait: cfg.Worker.CommitWait,
		Metrics: m, Logger: b.log, Breaker: b.tr,
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run starts the worker service with the dead-letter consumer, as
// cmd/worker does, until the test ends.
func (b *outageBundle) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var cons, dead jetstream.Consumer
	var err error
	if cons, err = queue.EnsureConsumer(ctx, b.q.JS, b.cfg.NATS, b.cfg.Worker); err != nil {
		t.Fatal(err)
	}
	if dead, err = queue.EnsureDeadLetter(ctx, b.q.JS, b.cfg.NATS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.q.JS.DeleteStream(context.Background(), queue.DeadLetterStreamName(b.cfg.NATS)) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.health = ln.Addr().String()
	ln.Close()
	done := make(chan error, 1)
	go func() {
		done <- worker.RunService(ctx, worker.ServiceConfig{
			Worker: b.w, Store: b.st, Conn: b.q.Conn, Consumer: cons, Publisher: b.pub,
			JS: b.q.JS, NATS: b.cfg.NATS, DeadLetter: dead, HealthAddr: b.health, Gatherer: b.reg,
			Concurrency: b.cfg.Worker.Concurrency, InProgressEvery: b.cfg.Worker.InProgressEvery,
			ShutdownGrace: b.cfg.Worker.ShutdownGrace, PanicDelay: shippedPanicDelay / timeScale, SweepEvery: -1, Logger: b.log,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunService: %v", err)
		}
	})
}

// ingest records and publishes n messages with ids <prefix>1..<prefix>n,
// each with classText, as cmd/ingest does (its default -parallel 8), and
// returns the batch id.
func (b *outageBundle) ingest(t *testing.T, prefix string, n int) string {
	t.Helper()
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "{\"id\":\"%s%d\",\"text\":%q}\n", prefix, i, classText)
	}
	in, err := ingest.New(ingest.Config{Store: b.st, Publisher: b.pub, SchemaID: "customer_message", MaxTextBytes: 32768, Parallel: 8})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := in.Run(context.Background(), strings.NewReader(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Published != n {
		t.Fatalf("ingest published %d of %d: %+v", sum.Published, n, sum)
	}
	return sum.BatchID
}

func (b *outageBundle) summary(t *testing.T, batchID string) store.BatchSummary {
	t.Helper()
	bs, err := b.st.BatchSummary(context.Background(), b.st.Pool, batchID)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func (b *outageBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	return (&testBundle{st: b.st}).count(t, query, args...)
}

// readyz returns the worker's /readyz status and body.
func (b *outageBundle) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + b.health + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// paused returns extractq_worker_paused{reason} from the worker's /metrics.
func (b *outageBundle) paused(t *testing.T, reason string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + b.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	line := `extractq_worker_paused{reason="` + reason + `"} `
	for l := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), line); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s%s: %v", line, v, err)
			}
			return f
		}
	}
	t.Fatalf("no %q in /metrics", line)
	return 0
}

// deliveryBackOff is what the shipped (scaled) redelivery schedule adds up
// to: the ack wait of every delivery but the last.
func deliveryBackOff(w config.Worker) time.Duration {
	var sum time.Duration
	for _, d := range queue.BackOffSchedule(w.AckWait, w.MaxDeliver) {
		sum += d
	}
	return sum
}

// TestProviderOutage: a provider outage three times as long as the
// delivery back-off adds up to, with a backlog waiting, sends nothing to
// triage and loses nothing; the provider is called only by the probes
// while it fails, and work resumes within the breaker's cooldown plus 10s
// (all scaled by timeScale).
func TestProviderOutage(t *testing.T) {
	t.Parallel()
	// Each backlog is more than the runs one worker holds (its
	// concurrency) plus the messages the probes take, and drains in more
	// than one commit batch (64) after the outage. A worker that spends a
	// delivery on each run the paused provider fails (a nak for a
	// requeue) sends 14 to 19 of 100 to triage. The quota case waits
	// with 200: with 2,000 it cost 10 s more CPU under the race detector
	// and failed on no planted bug that 100 passed.
	cases := []struct {
		fault    fault
		messages int
	}{
		{faultQuota, 200},
		{faultHTML200, 100},
		{faultHTML502, 100},
		{faultGarbage, 100},
		{faultCredentials, 100},
	}
	// The cases mostly wait out their outage: run them all at once,
	// whatever -parallel allows.
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, tc := range cases {
		wg.Go(func() {
			t.Run(tc.fault.name, func(t *testing.T) { testOutage(t, tc.fault, tc.messages) })
		})
	}
}

// testOutage runs the outage of TestProviderOutage with fault f and
// messages waiting.
func testOutage(t *testing.T, f fault, messages int) {
	llm := newOutageLLM(t)
	b := newOutageBundle(t, llm)
	cfg := b.cfg
	outage := 3 * deliveryBackOff(cfg.Worker)
	// The backlog waits; work flows, then the provider fails.
	start := time.Now()
	batch := b.ingest(t, "o", messages)
	t.Logf("%s: ingested %d messages in %s", f.name, messages, time.Since(start))
	b.run(t)
	deadline := time.Now().Add(30 * time.Second)
	for b.summary(t, batch).Succeeded < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("no work done before the outage: %+v", b.summary(t, batch))
		}
		time.Sleep(5 * time.Millisecond)
	}
	llm.start(f)
	waiting := b.summary(t, batch).Queued
	time.Sleep(outage / 2)
	// Paused, and saying why.
	if code, body := b.readyz(t); code != http.StatusServiceUnavailable ||
		!strings.Contains(body, "paused: provider: circuit breaker") || !strings.Contains(body, string(f.class)) {
		t.Errorf("/readyz during the outage: %d %q, want 503 saying the provider paused work (%s)", code, body, f.class)
	}
	if v := b.paused(t, worker.PauseProvider); v != 1 {
		t.Errorf("extractq_worker_paused{reason=\"provider\"} = %v during the outage, want 1", v)
	}
	time.Sleep(outage - outage/2)
	if n := b.count(t, `SELECT count(*) FROM triage_items`); n != 0 {
		t.Errorf("%d triage items during the outage", n)
	}
	calls := llm.stop()
	lag := startLagMeter(t)

	// Every call the outage saw: those in flight when it began, the
	// ones that opened the breaker, and then one probe per cooldown,
	// each with its retries.
	attempts := 1
	if f.status >= 500 {
		attempts += cfg.Provider.MaxRetries
	}
	probes := int(outage/cfg.Provider.BreakerCooldown) + 1
	bound := (cfg.Worker.Concurrency + cfg.Provider.BreakerFailures + probes) * attempts
	t.Logf("%s: %d messages waiting, outage %s (3 x %s back-off, breaker cooldown %s, all scaled 1/%d): %d provider calls during it (bound %d: %d probes)",
		f.name, waiting, outage, deliveryBackOff(cfg.Worker), cfg.Provider.BreakerCooldown, timeScale, calls, bound, probes)
	if calls > bound {
		t.Errorf("%d provider calls during the outage, want at most %d", calls, bound)
	}

	// Work resumes within the cooldown plus 10s (scaled), plus the
	// scheduling delay of the machine, which no scale shrinks: a loaded
	// 2-core machine (load average 20-30) wakes goroutines hundreds of
	// milliseconds late, and resuming takes several wake-ups. The delay
	// is measured while the test waits (lag), not assumed. A worker that
	// let a probe pass after the outage's end resumes two cooldowns (1 s
	// scaled) after it at the earliest: on a machine that wakes it on
	// time (lag under 100 ms) that is past the limit, and it fails.
	deadline = time.Now().Add(cfg.Provider.BreakerCooldown + 10*time.Second/timeScale + 5*time.Second)
	for {
		d, ok := llm.resumed()
		if ok {
			within := cfg.Provider.BreakerCooldown + 10*time.Second/timeScale + 100*time.Millisecond + 2*lag.max()
			t.Logf("%s: first valid answer %s after the outage ended (limit %s, the machine's wake-up lag %s)", f.name, d, within, lag.max())
			if d > within {
				t.Errorf("work resumed %s after the outage, want within %s", d, within)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call answered within %s of the outage's end", cfg.Provider.BreakerCooldown+10*time.Second/timeScale+5*time.Second)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Nothing lost, nothing sent to people.
	deadline = time.Now().Add(2 * time.Minute)
	for !b.summary(t, batch).Done() {
		if time.Now().After(deadline) {
			t.Fatalf("batch not done: %+v", b.summary(t, batch))
		}
		time.Sleep(20 * time.Millisecond)
	}
	bs := b.summary(t, batch)
	if bs.Succeeded != messages || bs.Failed != 0 {
		t.Errorf("after the outage: %+v, want all %d succeeded", bs, messages)
	}
	if n := b.count(t, `SELECT count(*) FROM triage_items`); n != 0 {
		t.Errorf("%d triage items, want 0", n)
	}
	// Nothing left on the stream: the last acks follow the commits.
	deadline = time.Now().Add(10 * time.Second)
	for b.q.Messages(t) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := b.q.Messages(t); n != 0 {
		t.Errorf("the stream still holds %d messages", n)
		b.dumpStream(t)
	}
	if code, body := b.readyz(t); code != http.StatusOK {
		t.Errorf("/readyz after the outage: %d %q, want 200", code, body)
	}
	if v := b.paused(t, worker.PauseProvider); v != 0 {
		t.Errorf("extractq_worker_paused{reason=\"provider\"} = %v after the outage, want 0", v)
	}
}

// messageID returns the stored id of the message with external id ext.
func (b *outageBundle) messageID(t *testing.T, ext string) int64 {
	t.Helper()
	var id int64
	if err := b.st.Pool.QueryRow(context.Background(), `SELECT id FROM messages WHERE external_id = $1`, ext).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitDone polls the batch until no run is queued.
func (b *outageBundle) waitDone(t *testing.T, batch string, timeout time.Duration) store.BatchSummary {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		bs := b.summary(t, batch)
		if bs.Done() {
			return bs
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch not done after %s: %+v", timeout, bs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkPoisoned checks that of the batch's n messages only poison failed,
// as a triage item of kind delivery after the shipped delivery limit.
func (b *outageBundle) checkPoisoned(t *testing.T, batch string, n int, poison int64) {
	t.Helper()
	bs := b.waitDone(t, batch, 2*time.Minute)
	if bs.Succeeded != n-1 || bs.Failed != 1 {
		t.Errorf("%+v, want %d succeeded and the poison message failed", bs, n-1)
	}
	items, err := b.st.TriageItemList(context.Background(), b.st.Pool, store.TriageItemListParams{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d deliveries", b.cfg.Worker.MaxDeliver)
	if len(items) != 1 || items[0].MessageID != poison || items[0].Reason != "delivery" || !strings.Contains(items[0].Errors[0].Message, want) {
		t.Fatalf("triage items %+v, want the poison message's, kind delivery after %s", items, want)
	}
}

// TestPoisonMessage: with the shipped delivery limit, a message that
// crashes or stalls its worker on every delivery still reaches triage as
// kind delivery, while the messages around it succeed, at the shipped
// concurrency.
func TestPoisonMessage(t *testing.T) {
	t.Parallel()
	const n = 20

	// All mostly wait out redelivery delays: run them at once, whatever
	// -parallel allows.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		t.Run("HandlerPanics", func(t *testing.T) {
			b := newOutageBundle(t, newOutageLLM(t))
			batch := b.ingest(t, "p", n)
			poison := b.messageID(t, "p7")
			var tries atomic.Int64
			worker.SetTestHook(b.w, func(ctx context.Context, d *queue.Delivery) (queue.Decision, bool) {
				if d.Envelope.MessageID == poison {
					tries.Add(1)
					panic("poison message")
				}
				return queue.Decision{}, false
			})
			b.run(t)
			b.checkPoisoned(t, batch, n, poison)
			if got := tries.Load(); got != int64(b.cfg.Worker.MaxDeliver) {
				t.Errorf("poison message tried %d times, want %d (max_deliver)", got, b.cfg.Worker.MaxDeliver)
			}
		})
	})

	// The poison message has the 4th stream sequence, so the first worker,
	// which takes the first messages into its shipped 8 slots, gets it with
	// 7 others; those wait in their handlers until it dies, so that they go
	// down with it and come back with the poison message, all redelivered
	// at once, to the next worker.
	wg.Go(func() {
		t.Run("WorkerDies", func(t *testing.T) { testWorkerDies(t, n) })
	})
	// As many messages as the worker's slots: after the first death every
	// one of them comes back at once, the poison among them.
	wg.Go(func() {
		t.Run("RestartAmongInnocents", func(t *testing.T) { testWorkerDies(t, scaledConfig().Worker.Concurrency) })
	})
}

// testWorkerDies runs TestPoisonMessage's workers that die on the poison
// message, among n messages: each one dies when it is handed the poison
// message (its connection drops in the middle of the run and it never
// answers again), and the next one starts, as a supervisor would start it.
// The innocent messages on the first worker are still in their handlers
// when it dies. It checks that the poison message reaches triage as kind
// delivery after max_deliver deaths, every other message succeeds, and no
// other message is delivered more than 3 times (Isolation's bound: 2
// deliveries lost to the poison message at most).
func testWorkerDies(t *testing.T, n int) {
	b := newOutageBundle(t, newOutageLLM(t))
	batch := b.ingest(t, "k", n)
	poison := b.messageAtSeq(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if _, err := queue.EnsureConsumer(ctx, b.q.JS, b.cfg.NATS, b.cfg.Worker); err != nil {
		t.Fatal(err)
	}
	// The max-deliveries advisories, handled as cmd/worker handles them.
	dead, err := queue.EnsureDeadLetter(ctx, b.q.JS, b.cfg.NATS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.q.JS.DeleteStream(context.Background(), queue.DeadLetterStreamName(b.cfg.NATS)) })
	wg.Go(func() { queue.RunDeadLetter(ctx, b.q.JS, b.cfg.NATS, dead, b.w.DeliveryFailed, b.log) })

	seen := &deliveryCounts{most: map[int64]uint64{}}
	deaths := 0
	deadline := time.Now().Add(2 * time.Minute)
	for !b.summary(t, batch).Done() && time.Now().Before(deadline) {
		others := 0 // the first worker dies with every slot taken
		if deaths == 0 {
			others = min(n, b.cfg.Worker.Concurrency) - 1
		}
		died := b.runMortal(t, ctx, &wg, poison, others, seen)
		for alive := true; alive; {
			select {
			case <-died:
				deaths++
				alive = false
			case <-time.After(20 * time.Millisecond):
				alive = !b.summary(t, batch).Done()
			}
		}
	}
	b.checkPoisoned(t, batch, n, poison)
	if deaths != b.cfg.Worker.MaxDeliver {
		t.Errorf("%d workers died on the poison message, want %d (max_deliver)", deaths, b.cfg.Worker.MaxDeliver)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	redelivered := 0
	for id, most := range seen.most {
		if id == poison {
			continue
		}
		if most > 1 {
			redelivered++
		}
		if most > 3 {
			t.Errorf("message %d delivered %d times, want 3 at most", id, most)
		}
	}
	if redelivered < min(n, b.cfg.Worker.Concurrency)-1 {
		t.Errorf("%d other messages redelivered, want the %d in flight beside the poison message on the first worker",
			redelivered, min(n, b.cfg.Worker.Concurrency)-1)
	}
}

// deliveryCounts records the most deliveries each message was handed at.
type deliveryCounts struct {
	mu   sync.Mutex
	most map[int64]uint64
}

func (c *deliveryCounts) add(d *queue.Delivery) {
	c.mu.Lock()
	c.most[d.Envelope.MessageID] = max(c.most[d.Envelope.MessageID], d.NumDelivered)
	c.mu.Unlock()
}

// messageAtSeq returns the id of the message the runs stream holds at seq.
func (b *outageBundle) messageAtSeq(t *testing.T, seq uint64) int64 {
	t.Helper()
	str, err := b.q.JS.Stream(context.Background(), b.cfg.NATS.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := str.GetMsg(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	var env queue.Envelope
	if err := json.Unmarshal(m.Data, &env); err != nil {
		t.Fatal(err)
	}
	return env.MessageID
}

// runMortal starts a worker at the shipped concurrency on a connection of
// its own that dies when it is handed the message poison: the connection
// closes and the handler never returns a decision. The returned channel is
// closed then; the worker is stopped too. With others above 0, the other
// messages it is handed stay in their handlers until then, and go down
// with it, and the poison message kills it only once that many are there.
// Every delivery it is handed is recorded in seen.
func (b *outageBundle) runMortal(t *testing.T, ctx context.Context, wg *sync.WaitGroup, poison int64, others int, seen *deliveryCounts) <-chan struct{} {
	t.Helper()
	nc, js, err := queue.Connect(ctx, queuetest.URL(), "extractq-test-mortal", b.log)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, b.cfg.NATS.Stream, b.cfg.NATS.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	w := b.newWorker(t)
	died := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	var once sync.Once
	arrived := make(chan struct{}, b.cfg.Worker.Concurrency)
	worker.SetTestHook(w, func(hctx context.Context, d *queue.Delivery) (queue.Decision, bool) {
		seen.add(d)
		if d.Envelope.MessageID != poison {
			if others == 0 {
				return queue.Decision{}, false
			}
			arrived <- struct{}{}
			select {
			case <-died:
			case <-hctx.Done():
			}
			return queue.Nak(0), true // never reaches the server
		}
		for range others {
			select {
			case <-arrived:
			case <-hctx.Done():
			}
		}
		once.Do(func() {
			nc.Close()
			close(died)
			stop()
		})
		<-hctx.Done()
		return queue.Nak(0), true // never reaches the server
	})
	wg.Go(func() {
		defer nc.Close()
		defer stop()
		err := worker.RunService(wctx, worker.ServiceConfig{
			Worker: w, Store: b.st, Conn: nc, Consumer: cons, Publisher: queue.NewPublisher(js, b.cfg.NATS),
			Concurrency: b.cfg.Worker.Concurrency, InProgressEvery: b.cfg.Worker.InProgressEvery,
			ShutdownGrace: b.cfg.Worker.ShutdownGrace, PanicDelay: shippedPanicDelay / timeScale, SweepEvery: -1, Logger: b.log,
		})
		if err != nil {
			t.Errorf("RunService: %v", err)
		}
	})
	return died
}

// dumpStream logs what the runs stream and its consumer still hold.
func (b *outageBundle) dumpStream(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	str, err := b.q.JS.Stream(ctx, b.cfg.NATS.Stream)
	if err != nil {
		t.Log(err)
		return
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Log(err)
		return
	}
	t.Logf("stream state %+v", info.State)
	if c, err := str.Consumer(ctx, b.cfg.NATS.Consumer); err == nil {
		if ci, err := c.Info(ctx); err == nil {
			t.Logf("consumer: delivered %+v ack floor %+v pending %d ack pending %d redelivered %d waiting %d",
				ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
		}
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			t.Logf("seq %d: %v", seq, err)
			continue
		}
		var env queue.Envelope
		json.Unmarshal(m.Data, &env)
		var status string
		b.st.Pool.QueryRow(ctx, `SELECT status FROM runs WHERE message_id = $1 AND run_no = $2`, env.MessageID, env.RunNo).Scan(&status)
		t.Logf("seq %d at %s: headers %v envelope %+v run %s", seq, m.Time.Format(time.StampMilli), m.Header, env, status)
	}
}

// lagMeter measures how late the machine wakes a sleeping goroutine: the
// most a 10 ms sleep overran since it started.
type lagMeter struct {
	mu  sync.Mutex
	lag time.Duration
}

// startLagMeter starts a lagMeter; it stops when the test ends.
func startLagMeter(t *testing.T) *lagMeter {
	m := &lagMeter{}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		const tick = 10 * time.Millisecond
		for {
			start := time.Now()
			select {
			case <-done:
				return
			case <-time.After(tick):
			}
			if late := time.Since(start) - tick; late > 0 {
				m.mu.Lock()
				m.lag = max(m.lag, late)
				m.mu.Unlock()
			}
		}
	}()
	return m
}

func (m *lagMeter) max() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lag
}
