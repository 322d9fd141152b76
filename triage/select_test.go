package triage

import (
	"testing"

	"github.com/extractq/extractq/extracttype"
)

// TestSpanEvidence: a selected span becomes the field's evidence when it
// holds the value, in code points past emoji; one that does not is an
// error.
func TestSpanEvidence(t *testing.T) {
	t.Parallel()
	text := "🎉 Ann Lee, order AB-123 45; Ann Lee again"
	record := map[string]any{"full_name": "Ann Lee", "order_id": "AB12345", "city": nil, "note": "other"}
	found := []extracttype.Evidence{{Path: "/full_name", Start: 2, End: 9}}
	spans := readSpans(map[string][]string{
		"s:/full_name": {"28-35"}, // the second Ann Lee
		"s:/order_id":  {"17-26"}, // AB-123 45
		"s:/city":      {"2-5"},   // null: left out
		"s:/note":      {"2-5"},   // "Ann", not "other"
		"s:/bad":       {"5-2"},   // not a span
		"s:/past":      {"1-999"},
	})
	if _, ok := spans["/bad"]; ok {
		t.Error("readSpans kept an end before its start")
	}
	record["past"] = "x"
	ev, errs := spanEvidence(text, record, spans, found, nil)
	want := []extracttype.Evidence{{Path: "/order_id", Start: 17, End: 26, Normalized: true}, {Path: "/full_name", Start: 28, End: 35}}
	if len(ev) != len(want) || ev[0] != want[0] || ev[1] != want[1] {
		t.Errorf("evidence = %+v, want %+v", ev, want)
	}
	if len(errs) != 2 || errs[0].Path != "/note" || errs[0].Keyword != "evidence" || errs[1].Path != "/past" {
		t.Errorf("errors = %+v, want /note's and /past's", errs)
	}
}
