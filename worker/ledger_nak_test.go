package worker_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// gatedLLM answers chat call n (from 1) with script(n), after waiting for
// gates[n] to close when there is one. It counts the calls it answered
// with a 2xx: the paid ones.
type gatedLLM struct {
	script func(n int) (status int, body string)
	gates  map[int]chan struct{}

	mu       sync.Mutex
	n        int
	answered int
}

func (g *gatedLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.n++
	n := g.n
	g.mu.Unlock()
	if gate, ok := g.gates[n]; ok {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	status, body := g.script(n)
	if status < 300 {
		g.mu.Lock()
		g.answered++
		g.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write([]byte(body))
}

func (g *gatedLLM) paid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.answered
}

// completion is a chat completion whose reply is content, with usage.
func completion(t *testing.T, content string) string {
	t.Helper()
	b, err := json.Marshal(openai.ChatCompletionResponse{ID: "x", Object: "chat.completion", Model: "extractq-sim-1",
		Choices: []openai.ChatCompletionChoice{text(content)},
		Usage:   openai.Usage{PromptTokens: 1000, CompletionTokens: 100, TotalTokens: 1100}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const overloaded = `{"error":{"message":"overloaded","type":"server_error"}}`

// ledgerRow is one llm_calls row of a run, as the ledger tests read it.
type ledgerRow struct {
	Attempt               int
	Purpose, Finish       string
	Superseded, Valid     bool
	Estimated             bool
	Status, Bytes, Tokens int
}

// ledger returns the llm_calls rows of message externalID, in the order
// written.
func (b *testBundle) ledger(t *testing.T, externalID string) []ledgerRow {
	t.Helper()
	rows, err := b.st.Pool.Query(context.Background(), `SELECT c.attempt, c.purpose, c.finish_reason, c.superseded, c.valid,
		c.usage_estimated, c.http_status, c.reply_bytes, c.prompt_tokens + c.completion_tokens
		FROM llm_calls c JOIN messages m ON m.id = c.message_id WHERE m.external_id = $1 ORDER BY c.id`, externalID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []ledgerRow
	for rows.Next() {
		var r ledgerRow
		if err := rows.Scan(&r.Attempt, &r.Purpose, &r.Finish, &r.Superseded, &r.Valid, &r.Estimated, &r.Status, &r.Bytes, &r.Tokens); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitLedger polls until message externalID has n llm_calls rows.
func (b *testBundle) waitLedger(t *testing.T, externalID string, n int) []ledgerRow {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows := b.ledger(t, externalID)
		if len(rows) >= n {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s: %d llm_calls rows after 30s, want %d: %+v", externalID, len(rows), n, rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fastRetries is a provider.Transport that retries once, at once.
var fastRetries = &config.Provider{MaxRetries: 1, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond,
	Multiplier: 2, MaxElapsedTime: 5 * time.Second, BreakerFailures: 1000, BreakerCooldown: time.Second}

// TestLedgerNakedRun: every paid call of a run that was nak'ed is in the
// ledger, booked before the nak and marked superseded, and a redelivery's
// calls come on top; the outcome figures read the deciding delivery's
// calls only.
func TestLedgerNakedRun(t *testing.T) {
	t.Parallel()

	t.Run("RepairHitsAnOutage", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		llm := &gatedLLM{gates: map[int]chan struct{}{4: release}}
		llm.script = func(n int) (int, string) {
			switch n {
			case 1: // the first delivery's extract: answered, not grounded
				return 200, completion(t, record(t, map[string]any{"order_id": "999999"}))
			case 2, 3: // its repair: 503 beyond the one retry
				return 503, overloaded
			}
			return 200, completion(t, record(t, nil)) // the redelivery's extract: valid
		}
		b := setup(t, setupOpts{handler: llm, transport: fastRetries})
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock) // before the worker stops, should the test fail first
		sum := b.ingestReader(t, strings.NewReader(`{"id":"n1","text":"`+classText+`"}`+"\n"))

		// After the nak, before the redelivery: the answered extract is
		// booked, superseded, and the run is still queued.
		rows := b.waitLedger(t, "n1", 1)
		if len(rows) != 1 || !rows[0].Superseded || rows[0].Attempt != 1 || rows[0].Valid || rows[0].Tokens != 1100 {
			t.Fatalf("ledger after the nak: %+v", rows)
		}
		if n := b.count(t, `SELECT count(*) FROM failure_events`); n != 0 {
			t.Errorf("%d failure events for a delivery that decided nothing", n)
		}
		if n := b.count(t, `SELECT count(*) FROM runs WHERE status = 'queued'`); n != 1 {
			t.Fatalf("%d queued runs after the nak, want 1", n)
		}
		unblock()

		bs := b.wait(t, sum.BatchID)
		if bs.Succeeded != 1 {
			t.Fatalf("summary %+v, want the redelivery to succeed", bs)
		}
		rows = b.ledger(t, "n1")
		if len(rows) != 2 || !rows[0].Superseded || rows[1].Superseded || rows[1].Attempt != 1 || !rows[1].Valid {
			t.Fatalf("ledger after the redelivery: %+v", rows)
		}
		if paid := llm.paid(); len(rows) != paid || bs.LLMCalls != paid || bs.PromptTokens != 2000 || math.Abs(bs.CostUSD-2*(1000*0.15+100*0.60)/1e6) > 1e-12 {
			t.Fatalf("%d rows, summary %+v; the provider answered %d calls", len(rows), bs, paid)
		}
		acc, err := b.st.BatchAccountingGet(context.Background(), b.st.Pool, sum.BatchID)
		if err != nil {
			t.Fatal(err)
		}
		if acc.FirstPassFailures != 0 || acc.RepairCalls != 0 || math.Abs(acc.CostUSD-bs.CostUSD) > 1e-12 {
			t.Fatalf("accounting %+v: the outcome is the redelivery's first-pass success, the cost every paid call", acc)
		}
		if got := b.metric(t, "extractq_llm_calls_total"); got != 2 {
			t.Errorf("extractq_llm_calls_total %v, want 2", got)
		}

		// A redelivery of the run, now that it has an outcome, costs no call.
		before := llm.paid()
		var id int64
		if err := b.st.Pool.QueryRow(context.Background(), `SELECT message_id FROM runs WHERE batch_id = $1`, sum.BatchID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pub.Publish(context.Background(), "n1-again", queue.Envelope{MessageID: id, RunNo: 1, BatchID: sum.BatchID, SchemaID: "customer_message"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for b.metric(t, "extractq_redeliveries_acked_total") < 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if b.metric(t, "extractq_redeliveries_acked_total") != 1 || llm.paid() != before || len(b.ledger(t, "n1")) != 2 {
			t.Fatalf("redelivery of a decided run: %d more calls, %d rows", llm.paid()-before, len(b.ledger(t, "n1")))
		}
	})

	t.Run("UndecodableReplyIsBooked", func(t *testing.T) {
		t.Parallel()
		const garbage = `{"choices":[{"message":{"role":"assistant","content":["not", "a", "part"]}}]}`
		llm := &gatedLLM{script: func(n int) (int, string) {
			if n == 1 {
				return 200, garbage
			}
			return 200, completion(t, record(t, nil))
		}}
		b := setup(t, setupOpts{handler: llm, transport: fastRetries})
		sum := b.ingestReader(t, strings.NewReader(`{"id":"g1","text":"`+classText+`"}`+"\n"))
		bs := b.wait(t, sum.BatchID)
		rows := b.ledger(t, "g1")
		if bs.Succeeded != 1 || len(rows) != 2 || llm.paid() != 2 || bs.LLMCalls != 2 || bs.UsageEstimatedCalls != 1 {
			t.Fatalf("summary %+v, ledger %+v", bs, rows)
		}
		u := rows[0]
		if !u.Superseded || u.Finish != "undecodable" || u.Status != 200 || u.Bytes != len(garbage) || !u.Estimated || u.Valid || u.Tokens <= 0 {
			t.Fatalf("undecodable call booked as %+v", u)
		}
		var reply string
		if err := b.st.Pool.QueryRow(context.Background(), `SELECT reply FROM llm_calls WHERE superseded`).Scan(&reply); err != nil || reply != garbage {
			t.Fatalf("undecodable reply %q, %v", reply, err)
		}
	})

	t.Run("UndecodableIsNeverHumanWork", func(t *testing.T) {
		t.Parallel()
		// A captive portal answers 200 with a page on every call: a fault
		// of the provider's side, not of the message, so the run is put
		// back however often it happens (more often than max_deliver),
		// never sent to triage, and every paid call is booked. Once the
		// provider answers again the run succeeds.
		var healed atomic.Bool
		valid := completion(t, record(t, nil))
		llm := &gatedLLM{script: func(int) (int, string) {
			if healed.Load() {
				return 200, valid
			}
			return 200, `<html>captive portal</html>`
		}}
		b := setup(t, setupOpts{handler: llm, transport: fastRetries, maxDeliver: 2})
		sum := b.ingestReader(t, strings.NewReader(`{"id":"g2","text":"`+classText+`"}`+"\n"))
		testsignal.Eventually(t, time.Minute, "more paid calls than max_deliver", func() bool { return llm.paid() > 2 })
		healed.Store(true)
		bs := b.wait(t, sum.BatchID)
		if bs.Succeeded != 1 || bs.Failed != 0 {
			t.Fatalf("summary %+v: want the run succeeded, none failed", bs)
		}
		rows := b.ledger(t, "g2")
		if len(rows) != llm.paid() {
			t.Fatalf("%d ledger rows for %d paid calls: %+v", len(rows), llm.paid(), rows)
		}
		for _, r := range rows[:len(rows)-1] {
			if !r.Superseded || r.Finish != "undecodable" || !r.Estimated || r.Status != 200 {
				t.Errorf("portal call booked as %+v", r)
			}
		}
		if last := rows[len(rows)-1]; last.Superseded || !last.Valid {
			t.Errorf("the deciding call booked as %+v", last)
		}
		items, err := b.st.TriageItemList(context.Background(), b.st.Pool, store.TriageItemListParams{BatchID: sum.BatchID})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 0 {
			t.Fatalf("items %+v: a provider's fault became human work", items)
		}
	})

	t.Run("LosingDeliveryBooksItsCalls", func(t *testing.T) {
		t.Parallel()
		// The first call waits while another delivery's outcome is
		// committed; its own commit then finds the outcome there.
		release := make(chan struct{})
		llm := &gatedLLM{gates: map[int]chan struct{}{1: release},
			script: func(int) (int, string) { return 200, completion(t, record(t, nil)) }}
		b := setup(t, setupOpts{handler: llm})
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock)
		sum := b.ingestReader(t, strings.NewReader(`{"id":"r1","text":"`+classText+`"}`+"\n"))
		var id int64
		if err := b.st.Pool.QueryRow(context.Background(), `SELECT message_id FROM runs WHERE batch_id = $1`, sum.BatchID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for func() bool { llm.mu.Lock(); defer llm.mu.Unlock(); return llm.n == 0 }() {
			if time.Now().After(deadline) {
				t.Fatal("the worker made no call")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := b.st.RunOutcomeInsert(context.Background(), b.st.Pool, store.RunOutcomeParams{
			MessageID: id, RunNo: 1, SchemaID: "customer_message", SchemaVersion: b.schema.Version, Status: store.RunSucceeded,
			Calls: []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
				PromptTokens: 1000, CompletionTokens: 100, FinishReason: "stop", Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(record(t, nil))},
		}); err != nil {
			t.Fatal(err)
		}
		unblock()
		rows := b.waitLedger(t, "r1", 2)
		if len(rows) != 2 || rows[0].Superseded || !rows[1].Superseded || !rows[1].Valid {
			t.Fatalf("ledger %+v: want the committed call, then the losing delivery's, superseded", rows)
		}
	})
}
