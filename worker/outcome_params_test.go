package worker_test

import (
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/worker"
)

// A key the model invents may hold the customer's words: failure analytics
// (read by the analyst role) and the triage item's error list, both kept
// by erasure, get it folded.
func TestOutcomeParamsFoldsUnknownKeys(t *testing.T) {
	t.Parallel()
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	invented := extracttype.Error{Kind: extracttype.KindSchema, Path: "/Chloe Zhang, card 4111 1111 1111 1111",
		Keyword: "additionalProperties", Message: "property is not in the schema"}
	named := extracttype.Error{Kind: extracttype.KindSchema, Path: "/intent", Keyword: "enum", Message: "is not one of the allowed values"}
	budget := extracttype.Error{Kind: extracttype.KindBudget, Path: "/card 4111", Message: "over budget"}
	res := &pipeline.Result{
		Outcome: pipeline.OutcomeFailed,
		Calls:   []pipeline.Call{{Attempt: 1, Purpose: "extract", Errors: extracttype.ErrorList{invented, named}}},
		Errors:  extracttype.ErrorList{invented, named, budget},
	}
	p, err := worker.OutcomeParams(1, 1, schema, "m", res)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range p.Failures {
		paths = append(paths, f.Err.Path)
	}
	want := []string{"/(unknown)", "/intent", "/(unknown)"}
	if len(paths) != len(want) {
		t.Fatalf("failure paths %q, want %q", paths, want)
	}
	for i := range want {
		if paths[i] != want[i] {
			t.Errorf("failure paths %q, want %q", paths, want)
			break
		}
	}
	// The triage item outlives an erasure too; its reviewer sees the key
	// in the last reply, which erasure blanks.
	if p.Triage == nil || len(p.Triage.Errors) != 3 || p.Triage.Errors[0].Path != "/(unknown)" || p.Triage.Errors[1].Path != "/intent" {
		t.Errorf("triage errors %+v, want the keys folded", p.Triage)
	}
	if res.Errors[0].Path != invented.Path {
		t.Errorf("the result's own list was changed: %+v", res.Errors[0])
	}
}
