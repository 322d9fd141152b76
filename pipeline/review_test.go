package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/extractq/extractq/extracttype"
)

// reviewSchema is ruleSchema's document with the given x-review list on
// its root and one x-rules rule (so that names are checked across both).
func reviewSchema(t *testing.T, review string) (*Schema, error) {
	t.Helper()
	doc := `{
	  "$id": "https://example.test/review.json", "x-version": "1", "type": "object",
	  "required": ["kind", "amount_cents", "note", "items"],
	  "properties": {
	    "kind": {"type": "string", "enum": ["refund", "question"]},
	    "amount_cents": {"type": ["integer", "null"], "minimum": 0},
	    "note": {"type": ["string", "null"], "maxLength": 50},
	    "unbounded": {"type": "array", "items": {"type": "string"}},
	    "items": {"type": "array", "maxItems": 5, "items": {
	      "type": "object", "required": ["sku", "qty"],
	      "properties": {"sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer"}},
	      "x-review": [{"name": "qty_small", "rule": "self.qty <= 10", "message": "more than 10 of one item: a person confirms it", "field": "/qty"}]
	    }}
	  },
	  "x-rules": [{"name": "refund_has_amount", "rule": "self.kind != 'refund' || self.amount_cents != null", "message": "a refund needs an amount", "field": "/amount_cents"}],
	  "x-review": ` + review + `
	}`
	return CompileSchemaOptions("review", []byte(doc), CompileOptions{MaxTextBytes: 4096})
}

// A bad review rule stops the start as a bad x-rules rule does, named as
// an x-review rule.
func TestReviewStartErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, review, want string
	}{
		{"Syntax", `[{"name": "bad", "rule": "self.kind == ", "message": "m"}]`, "x-review at /x-review: rule bad: does not compile: ERROR: <input>:1:14: Syntax error"},
		{"UnknownFieldInRule", `[{"name": "bad", "rule": "self.amount > 1", "message": "m"}]`, "rule bad: does not compile: ERROR: <input>:1:5: undefined field 'amount'"},
		{"UnknownFieldPointer", `[{"name": "bad", "rule": "true", "message": "m", "field": "/amount"}]`, "rule bad: field /amount is not in the schema"},
		{"WrongType", `[{"name": "bad", "rule": "self.amount_cents", "message": "m"}]`, "rule bad: has type wrapper(int), want bool"},
		{"Cost", `[{"name": "bad", "rule": "self.unbounded.all(a, self.unbounded.all(b, a.contains(b)))", "message": "m"}]`, "rule bad: estimated cost"},
		{"NoMessage", `[{"name": "bad", "rule": "true"}]`, "rule bad: message is empty"},
		{"NameOfAnXRule", `[{"name": "refund_has_amount", "rule": "true", "message": "m"}]`, "rule refund_has_amount: name is used by another rule"},
		{"ReservedName", `[{"name": "grounded", "rule": "true", "message": "m"}]`, "name grounded is a built-in rule's"},
		{"NotAList", `{"name": "bad"}`, "x-review at /x-review: x-review is an object, want a list of rules"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := reviewSchema(t, tt.review)
			if err == nil {
				t.Fatalf("compiled; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
			var re *RuleError
			if !errors.As(err, &re) || re.Pointer != "/x-review" {
				t.Errorf("error %v is not a *RuleError at /x-review", err)
			}
		})
	}
}

// Review rules are assertions: a false one holds a valid record, a true
// one lets it pass; they never make a record invalid.
func TestReviewHolds(t *testing.T) {
	t.Parallel()
	s, err := reviewSchema(t, `[
	  {"name": "refund_small", "rule": "self.amount_cents == null || self.amount_cents <= 50000", "message": "refund above 500.00: a person confirms it", "field": "/amount_cents"}
	]`)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.ReviewRules()); got != 2 {
		t.Errorf("%d review rules, want 2", got)
	}
	if got := len(s.Rules()); got != 1 {
		t.Errorf("%d rules, want 1", got)
	}
	for _, tt := range []struct {
		name, inst string
		want       extracttype.ErrorList
	}{
		{"Passes", `{"kind": "refund", "amount_cents": 1999, "note": null, "items": [{"sku": "a", "qty": 1}]}`, nil},
		{"RefundHeld", `{"kind": "refund", "amount_cents": 50001, "note": null, "items": []}`,
			extracttype.ErrorList{{Kind: extracttype.KindHeld, Path: "/amount_cents", Keyword: "refund_small", Message: "refund above 500.00: a person confirms it"}}},
		{"NestedAtItsPath", `{"kind": "question", "amount_cents": null, "note": null, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 11}]}`,
			extracttype.ErrorList{{Kind: extracttype.KindHeld, Path: "/items/1/qty", Keyword: "qty_small", Message: "more than 10 of one item: a person confirms it"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inst := decodeInstance(t, tt.inst)
			if errs, _ := s.Validate(inst, "text"); len(errs) != 0 {
				t.Fatalf("a review rule made the record invalid: %v", errs)
			}
			if diff := cmp.Diff(tt.want, s.Review(inst, "text", MessageMeta{})); diff != "" {
				t.Errorf("held (-want +got):\n%s", diff)
			}
		})
	}
}

// The extractor holds a valid record a review rule does not let pass,
// whether it validated at the first pass or after the repair; a record
// that does not validate fails and is never reviewed.
func TestExtractorHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := func(t *testing.T) *Schema {
		var doc map[string]any
		b := loadTestSchema(t).Raw
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		doc["x-review"] = []any{map[string]any{"name": "few_items", "rule": "size(self.items) == 0 || self.items.all(i, i.qty <= 1)",
			"message": "more than one of an item: a person confirms it", "field": "/items"}}
		raw, _ := json.Marshal(doc)
		s, err := CompileSchema("order", raw)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	wantHeld := extracttype.ErrorList{{Kind: extracttype.KindHeld, Path: "/items", Keyword: "few_items", Message: "more than one of an item: a person confirms it"}}

	t.Run("FirstPass", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(validJSON))
		b.in.Schema = schema(t)
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeHeld || res.ValidAs != OutcomeSucceeded || len(res.Data) == 0 || len(res.Errors) != 0 {
			t.Fatalf("outcome %q valid as %q, data %s, errors %v", res.Outcome, res.ValidAs, res.Data, res.Errors)
		}
		if diff := cmp.Diff(wantHeld, res.Held); diff != "" {
			t.Errorf("held (-want +got):\n%s", diff)
		}
	})
	t.Run("AfterRepair", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), content(validJSON))
		b.in.Schema = schema(t)
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeHeld || res.ValidAs != OutcomeRepaired || len(res.Calls) != 2 {
			t.Fatalf("outcome %q valid as %q, %d calls", res.Outcome, res.ValidAs, len(res.Calls))
		}
		for _, c := range res.Calls {
			for _, e := range c.Errors {
				if e.Kind == extracttype.KindHeld {
					t.Errorf("call %d has a held entry in its errors: %v", c.Attempt, e)
				}
			}
		}
	})
	t.Run("InvalidIsNotReviewed", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), content(ungroundedJSON))
		b.in.Schema = schema(t)
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeFailed || len(res.Held) != 0 || res.Data != nil {
			t.Fatalf("outcome %q, held %v, data %s", res.Outcome, res.Held, res.Data)
		}
	})
}
