package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// qaOutcome is a first-pass success whose record's intent is intent,
// drawn for QA with draw under strata A at 50% and B at 10% (20% for
// other strata).
func qaOutcome(r store.Run, intent string, draw float64) store.RunOutcomeParams {
	p := succeededOutcome(r)
	p.Extraction.Data = []byte(fmt.Sprintf(`{"intent":%q,"order_id":"48213"}`, intent))
	p.QA = &store.QASampleParams{Draw: draw, Share: 0.2, StratifyBy: "/intent", Strata: map[string]float64{"A": 0.5, "B": 0.1}}
	return p
}

// The QA draw commits with the outcome: a success drawn below its
// stratum's share is sampled once, with that share and its call's cohort;
// one drawn above, a failed run, and a second outcome of a sampled run
// add nothing.
func TestQASampleDraw(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	in := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.RunOutcomeInsert(ctx, st.Pool, qaOutcome(in, "B", 0.09)); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, st.Pool, qaOutcome(in, "B", 0.09)); !errors.Is(err, store.ErrOutcomeExists) {
		t.Fatalf("second outcome: %v, want ErrOutcomeExists", err)
	}
	out := messageFixture(ctx, t, st, st.Pool, batch)
	other := messageFixture(ctx, t, st, st.Pool, batch)
	failed := messageFixture(ctx, t, st, st.Pool, batch)
	fp := qaOutcome(failed, "A", 0)
	fp.Status, fp.Extraction = store.RunFailed, nil
	fp.Triage = &store.TriageParams{Reason: "schema"}
	for i, err := range st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{
		qaOutcome(out, "B", 0.11),   // above B's 10%
		qaOutcome(other, "C", 0.19), // C is not named: 20%
		fp,
	}) {
		if err != nil {
			t.Fatalf("outcome %d: %v", i, err)
		}
	}
	list, err := st.QASampleList(ctx, st.Pool, store.QASampleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("%d samples, want 2 (B at 0.09, C at 0.19): %+v", len(list), list)
	}
	got := map[int64]store.QASample{list[0].MessageID: list[0], list[1].MessageID: list[1]}
	if s := got[in.MessageID]; s.Share != 0.1 || s.Stratum != "B" || s.Model != "sim-1" || s.PromptVersion != "extract.v1" || s.Status != store.QAOpen {
		t.Errorf("sample of stratum B: %+v", s)
	}
	if s := got[other.MessageID]; s.Share != 0.2 || s.Stratum != "C" {
		t.Errorf("sample of stratum C: %+v", s)
	}
}

// The false-accept estimate against figures computed by hand. Six
// reviewed samples: four of stratum A drawn at 50% (weight w = 2), two
// of B at 10% (w = 10); sum w = 28, sum w^2 = 216, so Kish's effective n
// is 28^2/216 = 3.63. /intent is wrong in one A and one B sample: the
// estimate is (2 + 10)/28 = 0.4286 (the unweighted share would be 2/6),
// and the Wilson 95% interval at n = 3.63 is [0.1085, 0.8220]. /order_id
// is wrong in one A sample: 2/28 = 0.0714 [0.0043, 0.5793]. The whole
// record is wrong in three samples (two A, one B): 14/28 = 0.5 [0.1415,
// 0.8585].
func TestQAFieldEstimates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	type verdicts struct{ intentWrong, orderWrong bool }
	plan := []struct {
		stratum string
		v       verdicts
	}{{"A", verdicts{true, false}}, {"A", verdicts{false, true}}, {"A", verdicts{}}, {"A", verdicts{}},
		{"B", verdicts{true, false}}, {"B", verdicts{}}}
	for _, p := range plan {
		r := messageFixture(ctx, t, st, st.Pool, batch)
		if err := st.RunOutcomeInsert(ctx, st.Pool, qaOutcome(r, p.stratum, 0)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range plan {
		id, err := st.QASampleClaimNext(ctx, st.Pool, store.QASampleClaimNextParams{Reviewer: "alice", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.QASampleClaimNext(ctx, st.Pool, store.QASampleClaimNextParams{Reviewer: "alice"}); err != nil {
			t.Fatal(err) // the same, renewed
		}
		err = st.QASampleReview(ctx, st.Pool, store.QASampleReviewParams{ID: id, Reviewer: "bob", Via: store.ViaUI,
			Verdicts: []store.QAVerdict{{Path: "/intent", Correct: true}}})
		if !errors.Is(err, store.ErrQAClaimed) {
			t.Fatalf("review of alice's claim by bob: %v, want ErrQAClaimed", err)
		}
		vs := []store.QAVerdict{{Path: "/intent", Correct: !p.v.intentWrong}, {Path: "/order_id", Correct: !p.v.orderWrong}}
		for i := range vs {
			if !vs[i].Correct {
				vs[i].Fixed = []byte(`"fixed"`)
			}
		}
		if err := st.QASampleReview(ctx, st.Pool, store.QASampleReviewParams{ID: id, Reviewer: "alice", Via: store.ViaUI, Verdicts: vs}); err != nil {
			t.Fatal(err)
		}
		if err := st.QASampleReview(ctx, st.Pool, store.QASampleReviewParams{ID: id, Reviewer: "alice", Via: store.ViaUI, Verdicts: vs}); !errors.Is(err, store.ErrQAReviewed) {
			t.Fatalf("second review: %v, want ErrQAReviewed", err)
		}
	}
	if _, err := st.QASampleClaimNext(ctx, st.Pool, store.QASampleClaimNextParams{Reviewer: "alice"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim with none open: %v, want ErrNotFound", err)
	}
	est, err := st.QAFieldEstimates(ctx, st.Pool, "support_ticket")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.QAEstimate{
		{Field: store.QAFieldRecord, Reviewed: 6, Wrong: 3, FalseAcceptRate: 0.5, EffectiveN: 3.6, Low: 0.141469, High: 0.858531},
		{Field: "/intent", Reviewed: 6, Wrong: 2, FalseAcceptRate: 0.428571, EffectiveN: 3.6, Low: 0.10855, High: 0.822047},
		{Field: "/order_id", Reviewed: 6, Wrong: 1, FalseAcceptRate: 0.071429, EffectiveN: 3.6, Low: 0.004279, High: 0.579301},
	}
	if len(est) != len(want) {
		t.Fatalf("estimates %+v, want %d rows", est, len(want))
	}
	for i, w := range want {
		w.SchemaID, w.SchemaVersion, w.PromptVersion, w.Model = "support_ticket", "1", "extract.v1", "sim-1"
		if est[i] != w {
			t.Errorf("row %d: %+v\nwant   %+v", i, est[i], w)
		}
	}
	labels, err := st.QALabels(ctx, st.Pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != 6 || len(labels[0].Verdicts) != 2 || labels[0].Verdicts[0].Correct || string(labels[0].Verdicts[0].Fixed) != `"fixed"` {
		t.Fatalf("labels: %+v", labels)
	}
}
