package erasure_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// seed stores messages of source "mail" with the ids done (their run
// finished) and queued (run 1 still queued), received ageDays ago.
func seed(t *testing.T, st *store.Store, batch string, ageDays int, done, queued []string) {
	t.Helper()
	ctx := t.Context()
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	ingest := func(id string) {
		text := "Order " + id + " never arrived."
		h := sha256.Sum256([]byte(text))
		if _, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "mail", ExternalID: id, Body: text,
			ContentHash: h[:], BatchID: batch, SchemaID: "customer_message"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range done {
		ingest(id)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE runs SET status = 'succeeded', finished_at = now() WHERE batch_id = $1`, batch); err != nil {
		t.Fatal(err)
	}
	for _, id := range queued {
		ingest(id)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE messages SET received_at = now() - make_interval(days => $2) WHERE batch_id = $1`, batch, ageDays); err != nil {
		t.Fatal(err)
	}
}

// erased returns the external ids of the erased messages, sorted.
func erased(t *testing.T, st *store.Store) []string {
	t.Helper()
	rows, err := st.Pool.Query(t.Context(), `SELECT external_id FROM messages WHERE erased_at IS NOT NULL ORDER BY external_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func statuses(res erasure.Result) []string {
	var out []string
	for _, r := range res.Results {
		out = append(out, r.ExternalID+":"+r.Status)
	}
	return out
}

func TestErase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	seed(t, st, "b-erase", 0, []string{"m-1", "m-2"}, []string{"q-1"})
	svc := erasure.New(st)
	mail := func(ids ...string) []store.MessageKey {
		var keys []store.MessageKey
		for _, id := range ids {
			keys = append(keys, store.MessageKey{Source: "mail", ExternalID: id})
		}
		return keys
	}
	req := erasure.Request{Keys: mail("m-1", "q-1", "m-1", "m-404"), Actor: "dpo", Via: store.ViaCLI, Reason: "request 118"}
	failed(t, st, "b-erase", "m-1", "Zanzibar")
	if got := searchQueue(t, st, "zanzibar"); len(got) != 1 {
		t.Fatalf("search before the erasure finds items %v, want m-1's", got)
	}

	// A dry run: the statuses it would have, a key given twice once.
	dry := req
	dry.DryRun = true
	res, err := svc.Erase(ctx, dry)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"m-1:would_erase", "q-1:queued", "m-404:not_found"}; !slices.Equal(statuses(res), want) ||
		res.WouldErase != 1 || res.Queued != 1 || res.NotFound != 1 || res.Erased != 0 || res.Given != 4 || res.Missed() != 2 || !res.DryRun {
		t.Errorf("dry run = %+v (%q), want %q", res, statuses(res), want)
	}
	if got := erased(t, st); len(got) != 0 {
		t.Fatalf("a dry run erased %q", got)
	}

	res, err = svc.Erase(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"m-1:erased", "q-1:queued", "m-404:not_found"}; !slices.Equal(statuses(res), want) || res.Erased != 1 || res.DryRun {
		t.Errorf("erase = %+v (%q), want %q", res, statuses(res), want)
	}
	if got := erased(t, st); !slices.Equal(got, []string{"m-1"}) {
		t.Errorf("erased %q, want m-1", got)
	}
	// The queue's search index (migration 000019) is of the erased
	// text: the search finds the message no more.
	if got := searchQueue(t, st, "Zanzibar"); len(got) != 0 {
		t.Errorf("search for an erased word finds items %v", got)
	}
	var via, actor, reason string
	if err := st.Pool.QueryRow(ctx, `SELECT via, actor, coalesce(reason, '') FROM audit_log WHERE action = 'erase' LIMIT 1`).Scan(&via, &actor, &reason); err != nil ||
		via != store.ViaCLI || actor != "dpo" || reason != "request 118" {
		t.Errorf("audit entry: %q %q %q (%v)", via, actor, reason, err)
	}
	res, _ = svc.Erase(ctx, req)
	if res.AlreadyErased != 1 || res.Erased != 0 {
		t.Errorf("again = %+v, want m-1 already erased", res)
	}

	// A key of the wrong source: the hint names the source its id has,
	// for the first Hints keys not found only.
	res, err = svc.Erase(ctx, erasure.Request{Keys: []store.MessageKey{{ExternalID: "m-2"}, {Source: "chat", ExternalID: "m-2"}},
		Actor: "dpo", Via: store.ViaCLI, DryRun: true, Hints: 1})
	if err != nil || len(res.Results) != 2 || !slices.Equal(res.Results[0].StoredUnder, []string{"mail"}) || res.Results[1].StoredUnder != nil {
		t.Errorf("hints = %+v, %v; want the first key's source named, the second not looked up", res.Results, err)
	}
	res, _ = svc.Erase(ctx, erasure.Request{Keys: []store.MessageKey{{ExternalID: "m-2"}}, Actor: "dpo", Via: store.ViaCLI, DryRun: true})
	if res.Results[0].StoredUnder != nil {
		t.Errorf("no hints asked, got %q", res.Results[0].StoredUnder)
	}

	// More keys than one transaction takes: erased in chunks, each key
	// once, in the order given.
	many := mail("m-2")
	for i := range store.MaxErasureKeys + 5 {
		many = append(many, store.MessageKey{Source: "mail", ExternalID: fmt.Sprintf("x-%d", i)})
	}
	many = append(many, mail("m-2")...)
	res, err = svc.Erase(ctx, erasure.Request{Keys: many, Actor: "dpo", Via: store.ViaCLI})
	if err != nil || len(res.Results) != store.MaxErasureKeys+6 || res.Erased != 1 || res.NotFound != store.MaxErasureKeys+5 ||
		res.Results[0].ExternalID != "m-2" || res.Results[len(res.Results)-1].ExternalID != fmt.Sprintf("x-%d", store.MaxErasureKeys+4) {
		t.Errorf("chunked: %d results, erased %d, not found %d, %v", len(res.Results), res.Erased, res.NotFound, err)
	}

	// Refused before anything is erased.
	_, err = svc.Erase(ctx, erasure.Request{Keys: many, Actor: "dpo", Via: store.ViaAPI, MaxKeys: store.MaxErasureKeys})
	if tm, ok := errors.AsType[*erasure.TooManyKeysError](err); !ok || tm.Keys != store.MaxErasureKeys+6 || tm.Max != store.MaxErasureKeys {
		t.Errorf("over MaxKeys: %v", err)
	}
	if _, err := svc.Erase(ctx, erasure.Request{Actor: "dpo", Via: store.ViaCLI}); !errors.Is(err, erasure.ErrNoKeys) {
		t.Errorf("no keys: %v", err)
	}
	if _, err := svc.Erase(ctx, erasure.Request{Keys: mail("m-2"), Via: store.ViaCLI}); err == nil {
		t.Error("no actor: no error")
	}

	// Postgres failing: a *StoppedError saying how far it got.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = svc.Erase(cctx, erasure.Request{Keys: mail("m-2"), Actor: "dpo", Via: store.ViaCLI})
	if se, ok := errors.AsType[*erasure.StoppedError](err); !ok || se.Done != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if got := erased(t, st); !slices.Contains(got, "m-1") || slices.Contains(got, "q-1") {
		t.Errorf("erased %q", got)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	seed(t, st, "b-old", 100, []string{"o-1", "o-2"}, []string{"o-q"})
	seed(t, st, "b-young", 2, []string{"y-1"}, nil)
	svc := erasure.New(st)
	now := time.Now()

	for _, tt := range []struct {
		cutoff time.Time
		future bool
	}{
		{now.Add(time.Hour), true},
		{now.Add(-3 * time.Hour), false},
	} {
		_, err := svc.Purge(ctx, erasure.PurgeRequest{ReceivedBefore: tt.cutoff, Actor: "retention", Via: store.ViaCLI})
		if ce, ok := errors.AsType[*erasure.CutoffError](err); !ok || ce.Future != tt.future {
			t.Errorf("cutoff %v: %v, want a CutoffError (future %v)", tt.cutoff, err, tt.future)
		}
	}
	if err := erasure.CheckCutoff(now.Add(-erasure.MinRetention), now); err != nil {
		t.Errorf("a cutoff MinRetention ago: %v", err)
	}

	cutoff := now.Add(-90 * 24 * time.Hour)
	res, err := svc.Purge(ctx, erasure.PurgeRequest{ReceivedBefore: cutoff, Actor: "retention", Via: store.ViaCLI, DryRun: true})
	if err != nil || res.Erased != 2 || res.KeptQueued != 1 || len(erased(t, st)) != 0 {
		t.Fatalf("dry run = %+v, %v", res, err)
	}
	var progress []int
	res, err = svc.Purge(ctx, erasure.PurgeRequest{ReceivedBefore: cutoff, Actor: "retention", Via: store.ViaCLI,
		Progress: func(n int) { progress = append(progress, n) }})
	if err != nil || res.Erased != 2 || res.KeptQueued != 1 || len(progress) == 0 || progress[len(progress)-1] != 2 {
		t.Fatalf("purge = %+v, %v, progress %v", res, err, progress)
	}
	if got := erased(t, st); !slices.Equal(got, []string{"o-1", "o-2"}) {
		t.Errorf("erased %q, want o-1 and o-2", got)
	}
	// The reason defaults to the cutoff.
	var reason string
	if err := st.Pool.QueryRow(ctx, `SELECT reason FROM audit_log WHERE action = 'purge' LIMIT 1`).Scan(&reason); err != nil ||
		reason != "received before "+cutoff.UTC().Format(time.RFC3339) {
		t.Errorf("purge reason %q (%v)", reason, err)
	}
}

// failed records the latest run of message id (source mail) as failed,
// with a triage item, and appends word to the message's text.
func failed(t *testing.T, st *store.Store, batch, id, word string) {
	t.Helper()
	ctx := t.Context()
	var msg int64
	if err := st.Pool.QueryRow(ctx, `UPDATE messages SET body = body || ' ' || $3 WHERE source = 'mail' AND external_id = $1 AND batch_id = $2 RETURNING id`,
		id, batch, word).Scan(&msg); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE runs SET status = 'queued', finished_at = NULL WHERE message_id = $1`, msg); err != nil {
		t.Fatal(err)
	}
	errs := extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/order_id", Keyword: "required", Message: "required property is missing"}}
	if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: msg, RunNo: 1, SchemaID: "customer_message", SchemaVersion: "1",
		Status: store.RunFailed, Calls: []store.LLMCall{{Attempt: 1, Model: "m", PromptVersion: "p", RequestMode: "response_format", Reply: "{}", ErrorCount: 1}},
		Triage: &store.TriageParams{Reason: "schema", Errors: errs, LastReply: "{}"}}); err != nil {
		t.Fatal(err)
	}
}

// searchQueue returns the triage items, in any status, whose message
// text the queue's search finds q in.
func searchQueue(t *testing.T, st *store.Store, q string) []int64 {
	t.Helper()
	items, err := st.TriageQueueList(t.Context(), st.Pool, store.TriageQueueListParams{
		Filter: store.TriageFilter{Status: store.TriageAnyStatus, Search: q}})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}
