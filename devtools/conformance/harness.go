package conformance

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/worker"
)

// TestProviders runs every case on every target, each as the subtest
// <target>/<case>, in parallel. Each case gets its own simulator (the
// target's profile, the case's rates) on an in-process HTTP server, the
// real provider.Transport, pipeline.Extractor and worker.Worker set for
// the target's provider, and one message of its own in a store shared by
// the whole run (storetest: a schema of the test database). The worker
// handles the message's first delivery (and, for a case with
// Deliveries, the next ones while it naks); then the run's decision, its
// status, its extraction or triage item and its ledger rows are checked
// against the case's Expect, and the case's Check runs.
//
// Whatever the case, a run must never store a record that does not
// validate, never leave a ledger row with no tokens or no cost (a reply
// without usage is estimated and marked so), and keep every paid call (a
// 200 the server sent, decodable or not, of a delivery that decided the
// run or was nak'ed) in the ledger.
func TestProviders(t *testing.T, targets []Target, cases []Case) {
	t.Helper()
	s := newSuite(t)
	for _, tg := range targets {
		t.Run(tg.Name(), func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					t.Parallel()
					s.run(t, tg, c)
				})
			}
		})
	}
}

// suite is what the cases of one Run share.
type suite struct {
	st      *store.Store
	cfg     *config.Config
	schemas map[string]*pipeline.Schema
	prompt  *pipeline.Prompt
	batch   string
	seq     atomic.Int64
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{st: storetest.NewStore(t), cfg: config.Default(), schemas: map[string]*pipeline.Schema{}, batch: "conformance"}
	for id, file := range map[string]string{SchemaCustomer: "customer_message.v1.json", SchemaReturn: "return_request.v1.json"} {
		s.schemas[id] = loadWithoutRules(t, id, file)
	}
	var err error
	if s.prompt, err = pipeline.LoadPrompt("extract.v1"); err != nil {
		t.Fatal(err)
	}
	if err := s.st.BatchInsert(context.Background(), s.st.Pool, store.BatchInsertParams{ID: s.batch, SchemaID: SchemaCustomer}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Run is one case's run on one target, as the checks see it.
type Run struct {
	Env  Env
	Case Case
	// Want is what the case expects on the target.
	Want Expect
	// Text is the message's text.
	Text string
	// Exchanges are the chat requests the server answered, in order.
	Exchanges []Exchange
	// Decisions are what the worker decided for each delivery, "ack",
	// "nak 10ms", ...; Decision is the last.
	Decisions []string
	Decision  string
	// Status is the run's status in Postgres.
	Status string
	// Triage is the triage item's reason, "" without one.
	Triage string
	// Extraction is the stored record, nil without one.
	Extraction json.RawMessage
	// Ledger is the run's rows of llm_calls, in attempt order.
	Ledger []LedgerRow
	// Failures are the run's failure events, in order.
	Failures []extracttype.Error
	// StoredText is the message's text as stored.
	StoredText string
}

// Exchange is one chat request and the server's answer.
type Exchange struct {
	At      time.Time
	Request []byte
	Status  int
	Header  http.Header
	Body    []byte
}

// LedgerRow is one row of llm_calls.
type LedgerRow struct {
	Attempt          int
	Purpose          string
	RepairStrategy   string
	PromptTokens     int
	CompletionTokens int
	CostUSD          float64
	FinishReason     string
	Reply            string
	Stripped         string
	Valid            bool
	Patch            json.RawMessage
	CachedTokens     int
	UsageEstimated   bool
	Superseded       bool
	HTTPStatus       int
	ReplyBytes       int
}

// base is the suite's simulator configuration: no fault, every listed
// error fixed by the repair, short waits.
func base(p llmsim.Profile) config.Simulator {
	return config.Simulator{Profile: string(p), Seed: 1, RepairFixRate: 1, RetryAfter: retryAfter}
}

func (s *suite) run(t *testing.T, tg Target, c Case) {
	env := NewEnv(tg, c.Mode)
	if c.Needs != nil {
		if f := c.Needs(env); f != "" {
			t.Skipf("profile %s lacks feature %s", tg.Profile, f)
		}
	}
	want := c.Expect(env)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	ctx := context.Background()

	simCfg := base(tg.Profile)
	if c.Sim != nil {
		c.Sim(&simCfg)
	}
	sim := llmsim.New(simCfg, log)
	var h http.Handler = sim
	if c.Front != nil {
		h = c.Front(&Servers{Profile: tg.Profile, Sim: sim, Main: sim, New: func(mod func(*config.Simulator)) http.Handler {
			cfg := simCfg
			mod(&cfg)
			return llmsim.New(cfg, log)
		}})
	}
	rec := &recorder{next: h}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)

	baseTr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(baseTr.CloseIdleConnections)
	tr := provider.New(config.Provider{MaxRetries: transportRetries, InitialInterval: 2 * time.Millisecond,
		MaxInterval: 10 * time.Millisecond, Multiplier: 2, MaxElapsedTime: 30 * time.Second, BreakerFailures: 1000}, baseTr, nil, log)
	cfg := s.cfg
	model := cmp.Or(c.Model, cfg.LLM.Model)
	price := cfg.Prices.Models[model]
	ext := pipeline.NewExtractor(provider.NewChatClient(tr, srv.URL+"/v1", "conformance"), pipeline.ExtractorConfig{
		Model: model, RequestMode: env.Mode, Provider: tg.Provider,
		MaxCompletionTokens: cmp.Or(c.MaxCompletionTokens, cfg.LLM.MaxCompletionTokens),
		ContextWindowTokens: cfg.LLM.ContextWindowTokens, Timeout: 30 * time.Second,
		Budget: pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
		Price: pipeline.Price{InputPerMTok: price.InputPerMTok, CachedInputPerMTok: price.CachedInputPerMTok,
			OutputPerMTok: price.OutputPerMTok},
		PriceVersion: cfg.Prices.Version, Logger: log, FixedParts: tr.FixedParts(),
	})
	schemaID := cmp.Or(c.Schema, SchemaCustomer)
	schema := s.schemas[schemaID]
	w, err := worker.New(worker.Config{
		Store: s.st, Extractor: ext, Model: model, NakDelay: 10 * time.Millisecond, Logger: log,
		Schemas: map[string]worker.SchemaEntry{schemaID: {Schema: schema, Prompt: s.prompt,
			Repair: cmp.Or(c.Repair, pipeline.RepairRegenerate)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	text := c.Text
	if text == "" {
		text = customerText
		if schemaID == SchemaReturn {
			text = returnText
		}
	}
	in, err := s.st.MessageIngest(ctx, s.st.Pool, store.MessageIngestParams{
		Source: "conformance", ExternalID: fmt.Sprintf("%s/%s/%d", tg.Name(), c.Name, s.seq.Add(1)),
		Body: text, ContentHash: ingest.ContentHash(text), BatchID: s.batch, SchemaID: schemaID,
	})
	if err != nil {
		t.Fatal(err)
	}
	var decisions []string
	delivered, requeues := uint64(1), 0
	for n := 1; n <= max(c.Deliveries, 1); n++ {
		dec := w.Handle(ctx, &queue.Delivery{
			Envelope:     queue.Envelope{MessageID: in.Message.ID, RunNo: in.Run.RunNo, BatchID: s.batch, SchemaID: schemaID},
			NumDelivered: delivered, MaxDeliver: 5, Requeues: requeues,
		})
		decisions = append(decisions, dec.String())
		// A requeue puts the run back as a new message (its deliveries
		// start again at 1); a nak delivers the same message again.
		switch d, _, _ := strings.Cut(dec.String(), " "); d {
		case "requeue":
			delivered, requeues = 1, requeues+1
			continue
		case "nak":
			delivered++
			continue
		}
		break
	}

	r := &Run{Env: env, Case: c, Want: want, Text: text, Exchanges: rec.exchanges(),
		Decisions: decisions, Decision: decisions[len(decisions)-1]}
	s.read(t, r, in.Message.ID, in.Run.RunNo)
	r.check(t, want, schema)
	if c.Check != nil && !t.Failed() {
		c.Check(t, r)
	}
}

// read fills r from Postgres.
func (s *suite) read(t *testing.T, r *Run, messageID int64, runNo int) {
	t.Helper()
	ctx := context.Background()
	db := s.st.Pool
	if err := db.QueryRow(ctx, `SELECT status FROM runs WHERE message_id = $1 AND run_no = $2`, messageID, runNo).Scan(&r.Status); err != nil {
		t.Fatalf("reading the run: %v", err)
	}
	if err := db.QueryRow(ctx, `SELECT body FROM messages WHERE id = $1`, messageID).Scan(&r.StoredText); err != nil {
		t.Fatalf("reading the message: %v", err)
	}
	err := db.QueryRow(ctx, `SELECT reason FROM triage_items WHERE message_id = $1 AND run_no = $2`, messageID, runNo).Scan(&r.Triage)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("reading the triage item: %v", err)
	}
	err = db.QueryRow(ctx, `SELECT data FROM extractions WHERE message_id = $1 AND run_no = $2`, messageID, runNo).Scan(&r.Extraction)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("reading the extraction: %v", err)
	}
	rows, err := db.Query(ctx, `
SELECT attempt, purpose, repair_strategy, prompt_tokens, completion_tokens, cost_usd::float8, finish_reason,
       reply, stripped, valid, patch, cached_tokens, usage_estimated, superseded, http_status, reply_bytes
FROM llm_calls WHERE message_id = $1 AND run_no = $2 ORDER BY attempt, id`, messageID, runNo)
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	r.Ledger, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerRow, error) {
		var l LedgerRow
		var patch []byte
		err := row.Scan(&l.Attempt, &l.Purpose, &l.RepairStrategy, &l.PromptTokens, &l.CompletionTokens, &l.CostUSD,
			&l.FinishReason, &l.Reply, &l.Stripped, &l.Valid, &patch, &l.CachedTokens, &l.UsageEstimated, &l.Superseded,
			&l.HTTPStatus, &l.ReplyBytes)
		l.Patch = patch
		return l, err
	})
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	rows, err = db.Query(ctx, `SELECT kind, path, keyword FROM failure_events WHERE message_id = $1 AND run_no = $2 ORDER BY id`, messageID, runNo)
	if err != nil {
		t.Fatalf("reading the failure events: %v", err)
	}
	r.Failures, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (extracttype.Error, error) {
		var e extracttype.Error
		err := row.Scan(&e.Kind, &e.Path, &e.Keyword)
		return e, err
	})
	if err != nil {
		t.Fatalf("reading the failure events: %v", err)
	}
}

// check compares r with want and checks the suite's invariants.
func (r *Run) check(t *testing.T, want Expect, schema *pipeline.Schema) {
	t.Helper()
	wantStatus, wantDecision := string(want.Outcome), "ack"
	if want.Outcome == Nak {
		wantStatus, wantDecision = store.RunQueued, "nak"
	}
	d, _, _ := strings.Cut(r.Decision, " ")
	if d == "requeue" {
		d = "nak" // put back without an outcome, as a new message
	}
	if d != wantDecision {
		t.Errorf("decision %q, want %s", r.Decision, wantDecision)
	}
	if r.Status != wantStatus {
		t.Errorf("run status %s, want %s (triage %q, failures %v)", r.Status, wantStatus, r.Triage, r.Failures)
	}
	switch {
	case want.Outcome == Failed && r.Triage != string(want.Kind):
		t.Errorf("triage reason %q, want %s", r.Triage, want.Kind)
	case want.Outcome != Failed && r.Triage != "":
		t.Errorf("triage item with reason %s, want none", r.Triage)
	}

	// Never a stored record that does not validate.
	valid := want.Outcome == Succeeded || want.Outcome == Repaired
	switch {
	case valid && r.Extraction == nil:
		t.Errorf("no extraction stored for a %s run", want.Outcome)
	case !valid && r.Extraction != nil:
		t.Errorf("extraction stored for a %s run: %s", want.Outcome, r.Extraction)
	case r.Extraction != nil:
		inst, err := pipeline.DecodeStrict(r.Extraction)
		if err != nil {
			t.Errorf("stored extraction is not JSON: %v", err)
		} else if errs, _ := schema.Validate(inst, r.StoredText); len(errs) > 0 {
			t.Errorf("stored extraction does not validate: %v\n%s", errs, r.Extraction)
		}
	}

	if len(r.Exchanges) != want.Calls {
		t.Errorf("server answered %d chat requests (statuses %v), want %d", len(r.Exchanges), r.statuses(), want.Calls)
	}
	got := make([]Row, len(r.Ledger))
	for i, l := range r.Ledger {
		got[i] = Row{Purpose: l.Purpose, Finish: l.FinishReason, Superseded: l.Superseded, Estimated: l.UsageEstimated}
	}
	if !slices.Equal(got, want.Ledger) {
		t.Errorf("ledger rows %v, want %v", got, want.Ledger)
	}
	// Never a row without tokens or cost: a reply without usage is
	// estimated and marked so, never a silent $0.
	for _, l := range r.Ledger {
		if l.PromptTokens <= 0 || l.CostUSD <= 0 || (l.CompletionTokens <= 0 && l.FinishReason != "content_filter") {
			t.Errorf("ledger row of attempt %d: %d prompt + %d completion tokens, $%g (estimated %v): a paid call booked without its usage",
				l.Attempt, l.PromptTokens, l.CompletionTokens, l.CostUSD, l.UsageEstimated)
		}
		if l.CachedTokens < 0 || l.CachedTokens > l.PromptTokens {
			t.Errorf("ledger row of attempt %d: %d cached of %d prompt tokens", l.Attempt, l.CachedTokens, l.PromptTokens)
		}
		if (l.FinishReason == pipeline.FinishUndecodable) != (l.HTTPStatus != 0) {
			t.Errorf("ledger row of attempt %d: finish %q with http_status %d", l.Attempt, l.FinishReason, l.HTTPStatus)
		}
	}
	// Every paid call in the ledger.
	paid := 0
	for _, x := range r.Exchanges {
		if x.Status == http.StatusOK {
			paid++
		}
	}
	if paid != len(r.Ledger) {
		t.Errorf("server answered %d calls with 200; the ledger holds %d rows", paid, len(r.Ledger))
	}
}

func (r *Run) statuses() []int {
	out := make([]int, len(r.Exchanges))
	for i, x := range r.Exchanges {
		out[i] = x.Status
	}
	return out
}

// Request returns the i-th chat request body, decoded.
func (r *Run) Request(t *testing.T, i int) map[string]any {
	t.Helper()
	if i >= len(r.Exchanges) {
		t.Fatalf("no chat request %d: the server answered %d", i, len(r.Exchanges))
	}
	m := jsonObject(r.Exchanges[i].Request)
	if m == nil {
		t.Fatalf("chat request %d is not a JSON object", i)
	}
	return m
}

// recorder serves next and keeps every chat request with its answer.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	xs   []Exchange
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		rc.next.ServeHTTP(w, r)
		return
	}
	at := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	cw := &captureWriter{ResponseWriter: w}
	rc.next.ServeHTTP(cw, r)
	rc.mu.Lock()
	rc.xs = append(rc.xs, Exchange{At: at, Request: body, Status: cmp.Or(cw.status, http.StatusOK), Header: w.Header().Clone(), Body: cw.body.Bytes()})
	rc.mu.Unlock()
}

func (rc *recorder) exchanges() []Exchange {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.xs)
}

type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// firstTries serves the first n tries of each request body with first,
// the later ones with then: a server that fails a call and answers its
// retry.
func firstTries(n int, first, then http.Handler) http.Handler {
	var mu sync.Mutex
	seen := map[[32]byte]int{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		k := sha256.Sum256(b)
		mu.Lock()
		seen[k]++
		try := seen[k]
		mu.Unlock()
		if try <= n {
			first.ServeHTTP(w, r)
			return
		}
		then.ServeHTTP(w, r)
	})
}

// loadWithoutRules compiles a bundled schema with its x-rules and x-review
// taken out.
// The suite checks what providers and servers do; a business rule (the
// intent→flow map, say) that the simulator's keyword heuristics break
// would turn a case's outcome into the rule's doing. The rules have their
// own tests (schemas/rules_test.go).
func loadWithoutRules(t *testing.T, id, file string) *pipeline.Schema {
	t.Helper()
	b, err := fs.ReadFile(schemas.FS, file)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			delete(v, "x-rules")
			delete(v, "x-review")
			for _, e := range v {
				strip(e)
			}
		case []any:
			for _, e := range v {
				strip(e)
			}
		}
	}
	strip(doc)
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	sc, err := pipeline.CompileSchema(id, b)
	if err != nil {
		t.Fatalf("schema %s (%s) without its rules: %v", id, file, err)
	}
	return sc
}
