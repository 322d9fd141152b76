package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// repairedOutcome is a run whose first call had the /order_id error of
// failedOutcome and whose repair validated.
func repairedOutcome(r store.Run) store.RunOutcomeParams {
	p := failedOutcome(r)
	p.Status, p.Triage = store.RunRepaired, nil
	p.Extraction = &store.ExtractionParams{Data: []byte(`{}`)}
	p.Failures = p.Failures[1:2] // the /order_id error at attempt 1
	return p
}

// failedOutcome is a run whose extraction and repair both failed.
func failedOutcome(r store.Run) store.RunOutcomeParams {
	errSKU := extracttype.Errorf(extracttype.KindSchema, "/items/3/sku", "pattern", "does not match the SKU pattern")
	errOrder := extracttype.Errorf(extracttype.KindRule, "/order_id", "grounded", "not found in the message")
	return store.RunOutcomeParams{
		MessageID: r.MessageID, RunNo: r.RunNo,
		SchemaID: "support_ticket", SchemaVersion: "1",
		Status: store.RunFailed,
		Calls: []store.LLMCall{
			{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "tools",
				PromptTokens: 300, CompletionTokens: 50, CostUSD: 0.001, LatencyMS: 10,
				FinishReason: "stop", Reply: `{"order_id":"1"}`, ErrorCount: 2},
			{Attempt: 2, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "tools", RepairStrategy: "patch",
				PromptTokens: 400, CompletionTokens: 30, CostUSD: 0.002, LatencyMS: 12,
				FinishReason: "stop", Reply: `[]`, ErrorCount: 1},
		},
		Triage: &store.TriageParams{
			Reason:    "schema",
			Errors:    extracttype.ErrorList{errSKU},
			LastReply: `[]`,
		},
		Failures: []store.FailureEvent{
			{CallIndex: 0, Err: errSKU},
			{CallIndex: 0, Err: errOrder},
			{CallIndex: 1, Err: errSKU},
		},
	}
}

func TestRunOutcomeInsert(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		st      *store.Store
		db      store.DBTX // the test's transaction, or its own store's pool
		batchID string
		run     store.Run
	}
	newBundle := func(ctx context.Context, t *testing.T, st *store.Store, db store.DBTX) *testBundle {
		t.Helper()
		batchID := batchFixture(ctx, t, st, db)
		return &testBundle{st: st, db: db, batchID: batchID, run: messageFixture(ctx, t, st, db, batchID)}
	}
	// setup gives the test a transaction on the shared schema.
	setup := func(t *testing.T) (context.Context, *testBundle) {
		t.Helper()
		ctx := t.Context()
		st, tx := storetest.TestTx(ctx, t)
		return ctx, newBundle(ctx, t, st, tx)
	}
	// setupPool gives the test a schema of its own, for outcomes written
	// on several connections at once or in no transaction of the test's.
	setupPool := func(t *testing.T) (context.Context, *testBundle) {
		t.Helper()
		ctx := t.Context()
		st := storetest.NewStore(t)
		return ctx, newBundle(ctx, t, st, st.Pool)
	}

	t.Run("SucceededWritesCallsAndExtraction", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		if err := b.st.RunOutcomeInsert(ctx, b.db, succeededOutcome(b.run)); err != nil {
			t.Fatal(err)
		}
		if n := count(ctx, t, b.db, "llm_calls", b.run.MessageID); n != 1 {
			t.Errorf("llm_calls = %d, want 1", n)
		}
		var purpose, schemaID string
		var cost float64
		err := b.db.QueryRow(ctx, `SELECT purpose, schema_id, cost_usd::float8 FROM llm_calls WHERE message_id = $1`,
			b.run.MessageID).Scan(&purpose, &schemaID, &cost)
		if err != nil {
			t.Fatal(err)
		}
		if purpose != "extract" || schemaID != "support_ticket" || cost != 0.00012 {
			t.Errorf("call: purpose %q schema %q cost %v", purpose, schemaID, cost)
		}
		exts, err := b.st.ExtractionList(ctx, b.db, store.ExtractionListParams{BatchID: b.batchID})
		if err != nil {
			t.Fatal(err)
		}
		if len(exts) != 1 {
			t.Fatalf("extractions = %d, want 1", len(exts))
		}
		e := exts[0]
		if e.MessageID != b.run.MessageID || e.RunNo != 1 || e.Outcome != "succeeded" || e.CreatedBy != "model" ||
			e.SchemaVersion != "1" || !strings.HasPrefix(e.ExternalID, "m-") {
			t.Errorf("extraction = %+v", e)
		}
		var data map[string]string
		if err := json.Unmarshal(e.Data, &data); err != nil || data["order_id"] != "48213" {
			t.Errorf("data = %s (%v)", e.Data, err)
		}
		if n := count(ctx, t, b.db, "triage_items", b.run.MessageID); n != 0 {
			t.Errorf("triage_items = %d, want 0", n)
		}
	})

	t.Run("SecondOutcomeWritesNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		if err := b.st.RunOutcomeInsert(ctx, b.db, succeededOutcome(b.run)); err != nil {
			t.Fatal(err)
		}
		err := b.st.RunOutcomeInsert(ctx, b.db, failedOutcome(b.run))
		if !errors.Is(err, store.ErrOutcomeExists) {
			t.Fatalf("err = %v, want ErrOutcomeExists", err)
		}
		for table, want := range map[string]int{"llm_calls": 1, "extractions": 1, "triage_items": 0, "failure_events": 0} {
			if n := count(ctx, t, b.db, table, b.run.MessageID); n != want {
				t.Errorf("%s = %d, want %d", table, n, want)
			}
		}
		rm, _ := b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: b.run.MessageID, RunNo: 1})
		if rm.Status != store.RunSucceeded {
			t.Errorf("status = %s, want succeeded kept", rm.Status)
		}
	})

	t.Run("ConcurrentOutcomesOneWins", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupPool(t)
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = b.st.RunOutcomeInsert(ctx, b.db, succeededOutcome(b.run)) })
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, store.ErrOutcomeExists):
				t.Errorf("outcome %d: %v", i, err)
			}
		}
		if ok != 1 {
			t.Errorf("%d outcomes written, want 1", ok)
		}
		if c := count(ctx, t, b.db, "llm_calls", b.run.MessageID); c != 1 {
			t.Errorf("llm_calls = %d, want 1", c)
		}
	})

	t.Run("FailedWritesTriageAndFailureEvents", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := failedOutcome(b.run)
		p.Failures = append(p.Failures, store.FailureEvent{CallIndex: -1,
			Err: extracttype.Errorf(extracttype.KindDelivery, "", "", "delivery limit reached")})
		if err := b.st.RunOutcomeInsert(ctx, b.db, p); err != nil {
			t.Fatal(err)
		}
		items, err := b.st.TriageItemList(ctx, b.db, store.TriageItemListParams{BatchID: b.batchID})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 {
			t.Fatalf("triage items = %d, want 1", len(items))
		}
		it := items[0]
		if it.MessageID != b.run.MessageID || it.Status != store.TriageOpen || it.Reason != "schema" ||
			len(it.Errors) != 1 || it.Errors[0] != p.Triage.Errors[0] || it.LastReply != "[]" {
			t.Errorf("triage item = %+v", it)
		}
		if n := count(ctx, t, b.db, "extractions", b.run.MessageID); n != 0 {
			t.Errorf("extractions = %d, want 0", n)
		}

		// One INSERT ... SELECT writes the events, in the order of its
		// join's plan: sort them.
		rows, err := b.db.Query(ctx, `
			SELECT f.attempt, f.kind, f.path, f.path_pattern, f.keyword, f.model, f.prompt_version,
			       coalesce(c.attempt, 0), f.llm_call_id IS NULL
			FROM failure_events f LEFT JOIN llm_calls c ON c.id = f.llm_call_id
			WHERE f.message_id = $1 ORDER BY f.llm_call_id IS NULL, f.attempt, f.path`, b.run.MessageID)
		if err != nil {
			t.Fatal(err)
		}
		type ev struct {
			attempt                                            int
			kind, path, pattern, keyword, model, promptVersion string
			callAttempt                                        int
			noCall                                             bool
		}
		var got []ev
		for rows.Next() {
			var e ev
			if err := rows.Scan(&e.attempt, &e.kind, &e.path, &e.pattern, &e.keyword, &e.model, &e.promptVersion,
				&e.callAttempt, &e.noCall); err != nil {
				t.Fatal(err)
			}
			got = append(got, e)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := []ev{
			{1, "schema", "/items/3/sku", "/items/*/sku", "pattern", "sim-1", "extract.v1", 1, false},
			{1, "rule", "/order_id", "/order_id", "grounded", "sim-1", "extract.v1", 1, false},
			{2, "schema", "/items/3/sku", "/items/*/sku", "pattern", "sim-1", "extract.v1", 2, false},
			{0, "delivery", "", "", "", "", "", 0, true},
		}
		if len(got) != len(want) {
			t.Fatalf("failure events = %+v, want %+v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("failure event %d = %+v, want %+v", i, got[i], want[i])
			}
		}
	})

	t.Run("NULInReplyStoredSafely", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := failedOutcome(b.run)
		bad := "{\"order_id\":\"4\x00 8\xff\"}"
		p.Calls[1].Reply, p.Calls[1].Stripped = bad, bad
		p.Triage.LastReply = bad
		p.Triage.Errors = extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/x\x00y", Message: "unexpected property"}}
		p.Failures = append(p.Failures, store.FailureEvent{CallIndex: 1, Err: p.Triage.Errors[0]})
		if err := b.st.RunOutcomeInsert(ctx, b.db, p); err != nil {
			t.Fatalf("outcome with NUL bytes: %v", err)
		}
		const clean = "{\"order_id\":\"4\uFFFD 8\uFFFD\"}"
		var reply, stripped string
		err := b.db.QueryRow(ctx, `SELECT reply, stripped FROM llm_calls WHERE message_id = $1 AND attempt = 2`,
			b.run.MessageID).Scan(&reply, &stripped)
		if err != nil {
			t.Fatal(err)
		}
		if reply != clean || stripped != clean {
			t.Errorf("reply = %q, stripped = %q, want %q", reply, stripped, clean)
		}
		items, err := b.st.TriageItemList(ctx, b.db, store.TriageItemListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 || items[0].LastReply != clean || items[0].Errors[0].Path != "/x\uFFFDy" {
			t.Errorf("triage items = %+v", items)
		}
	})

	t.Run("JSONEscapesPostgresRefusesStoredSafely", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := succeededOutcome(b.run)
		p.Extraction.Data = []byte(`{"note":"a\u0000b","s":"\ud800","ok":"\\u0000"}`)
		if err := b.st.RunOutcomeInsert(ctx, b.db, p); err != nil {
			t.Fatalf("outcome with \\u0000 in data: %v", err)
		}
		exts, err := b.st.ExtractionList(ctx, b.db, store.ExtractionListParams{})
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]string
		if err := json.Unmarshal(exts[0].Data, &data); err != nil {
			t.Fatal(err)
		}
		if data["note"] != "a\uFFFDb" || data["s"] != "\uFFFD" || data["ok"] != `\u0000` {
			t.Errorf("data = %q", data)
		}
	})

	t.Run("BadParamsWriteNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		cases := map[string]func(*store.RunOutcomeParams){
			"FailedWithoutTriage":  func(p *store.RunOutcomeParams) { p.Status = store.RunFailed },
			"UnknownStatus":        func(p *store.RunOutcomeParams) { p.Status = "queued" },
			"NoSchemaVersion":      func(p *store.RunOutcomeParams) { p.SchemaVersion = "" },
			"CallIndexOutOfRange":  func(p *store.RunOutcomeParams) { p.Failures = []store.FailureEvent{{CallIndex: 1}} },
			"SucceededWithTriage":  func(p *store.RunOutcomeParams) { p.Triage = &store.TriageParams{Reason: "schema"} },
			"SucceededWithoutData": func(p *store.RunOutcomeParams) { p.Extraction.Data = nil },
		}
		for name, edit := range cases {
			p := succeededOutcome(b.run)
			edit(&p)
			err := b.st.RunOutcomeInsert(ctx, b.db, p)
			if err == nil || errors.Is(err, store.ErrOutcomeExists) {
				t.Errorf("%s: err = %v, want a params error", name, err)
			}
		}
		rm, _ := b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: b.run.MessageID, RunNo: 1})
		if rm.Status != store.RunQueued {
			t.Errorf("status = %s, want queued", rm.Status)
		}
	})

	t.Run("UnknownRun", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := succeededOutcome(b.run)
		p.RunNo = 7
		if err := b.st.RunOutcomeInsert(ctx, b.db, p); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})

	t.Run("FailedStatementRollsBackRunStatus", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupPool(t)
		p := succeededOutcome(b.run)
		p.Calls[0].Purpose = "summarise" // refused by the CHECK constraint
		if err := b.st.RunOutcomeInsert(ctx, b.db, p); err == nil {
			t.Fatal("bad purpose accepted")
		}
		rm, _ := b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: b.run.MessageID, RunNo: 1})
		if rm.Status != store.RunQueued {
			t.Errorf("status = %s, want queued (the outcome is one transaction)", rm.Status)
		}
	})
}
