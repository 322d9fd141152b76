package pipeline

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/extractq/extractq/extracttype"
)

// ruleSchema is a small schema with the given x-rules on its root.
func ruleSchema(t *testing.T, rules string) (*Schema, error) {
	t.Helper()
	doc := `{
	  "$id": "https://example.test/rules.json", "x-version": "1", "type": "object",
	  "required": ["kind", "amount_cents", "date", "note", "items"],
	  "properties": {
	    "kind": {"type": "string", "enum": ["refund", "question"]},
	    "amount_cents": {"type": ["integer", "null"], "minimum": 0},
	    "date": {"type": ["string", "null"], "format": "date"},
	    "note": {"type": ["string", "null"], "maxLength": 50},
	    "free": {"type": "string"},
	    "unbounded": {"type": "array", "items": {"type": "string"}},
	    "items": {"type": "array", "maxItems": 5, "items": {
	      "type": "object", "required": ["sku", "qty"],
	      "properties": {"sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer"}},
	      "x-rules": [{"name": "qty_positive", "rule": "self.qty > 0", "message": "qty must be positive", "field": "/qty"}]
	    }}
	  },
	  "x-rules": ` + rules + `
	}`
	return CompileSchemaOptions("rules", []byte(doc), CompileOptions{MaxTextBytes: 4096})
}

func decodeInstance(t *testing.T, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRuleStartErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, rules, want string
	}{
		{"Syntax", `[{"name": "bad", "rule": "self.kind == ", "message": "m"}]`, "rule bad: does not compile: ERROR: <input>:1:14: Syntax error"},
		{"UnknownFieldInRule", `[{"name": "bad", "rule": "self.knd == 'refund'", "message": "m"}]`, "rule bad: does not compile: ERROR: <input>:1:5: undefined field 'knd'"},
		{"UnknownFieldPointer", `[{"name": "bad", "rule": "true", "message": "m", "field": "/amount"}]`, "rule bad: field /amount is not in the schema"},
		{"WrongType", `[{"name": "bad", "rule": "self.kind", "message": "m"}]`, "rule bad: has type string, want bool"},
		{"Cost", `[{"name": "bad", "rule": "self.unbounded.all(a, self.unbounded.all(b, a.contains(b)))", "message": "m"}]`, "rule bad: estimated cost"},
		{"NoMessage", `[{"name": "bad", "rule": "true"}]`, "rule bad: message is empty"},
		{"BadName", `[{"name": "Bad Name", "rule": "true", "message": "m"}]`, "rule Bad Name: name must be"},
		{"ReservedName", `[{"name": "grounded", "rule": "true", "message": "m"}]`, "rule grounded: name grounded is a built-in rule's"},
		{"DuplicateName", `[{"name": "qty_positive", "rule": "true", "message": "m"}]`, "name is used by another rule"},
		{"UnknownKey", `[{"name": "bad", "rule": "true", "message": "m", "messageExpression": "x"}]`,
			`rule #0 (bad): unknown key "messageExpression": the keys of a rule are name, rule, message, field`},
		{"MisspeltKey", `[{"name": "ok", "rule": "true", "message": "m"}, {"name": "bad", "rule": "true", "mesage": "m"}]`,
			`x-rules at /x-rules: rule #1 (bad): unknown key "mesage": the keys of a rule are name, rule, message, field`},
		{"RuleNotString", `[{"name": "bad", "rule": 5, "message": "m"}]`,
			`x-rules at /x-rules: rule #0 (bad): "rule" is a number (5), want a string (the CEL expression)`},
		{"EntryNotObject", `["self.kind == 'refund'"]`, `x-rules at /x-rules: rule #0: is a string, want an object {name, rule, message, field}`},
		{"NotAList", `{"name": "bad", "rule": "true", "message": "m"}`,
			`x-rules at /x-rules: x-rules is an object, want a list of rules, each an object {name, rule, message, field}`},
		{"Null", `null`, `x-rules at /x-rules: x-rules is null, want a list of rules`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ruleSchema(t, tt.rules)
			if err == nil {
				t.Fatalf("compiled; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
			for _, internal := range []string{"Go struct", "Go value", "pipeline.Rule", "json:", "rule ?"} {
				if strings.Contains(err.Error(), internal) {
					t.Errorf("error = %q shows Go's %q", err, internal)
				}
			}
			if tt.name != "DuplicateName" {
				var re *RuleError
				if !errors.As(err, &re) || re.Pointer != "/x-rules" {
					t.Errorf("error %v is not a *RuleError at /x-rules", err)
				}
			}
		})
	}
}

// The file name is in the start error, with the rule's name.
func TestLoadSchemaNamesFileAndRule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc := `{"$id": "https://example.test/x.json", "x-version": "1", "type": "object", "properties": {"a": {"type": "string"}},
	  "x-rules": [{"name": "a_set", "rule": "self.b == 1", "message": "m"}]}`
	if err := os.WriteFile(dir+"/x.json", []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadSchema(os.DirFS(dir), "x", "x.json")
	if err == nil || !strings.Contains(err.Error(), "x.json") || !strings.Contains(err.Error(), "rule a_set") ||
		!strings.Contains(err.Error(), "undefined field 'b'") {
		t.Fatalf("LoadSchema error = %v, want the file, the rule and the reason", err)
	}
}

func TestRulesEvaluate(t *testing.T) {
	t.Parallel()
	s, err := ruleSchema(t, `[
	  {"name": "refund_has_amount", "rule": "self.kind != 'refund' || self.amount_cents != null", "message": "a refund needs an amount", "field": "/amount_cents"},
	  {"name": "refund_max", "rule": "self.amount_cents == null || self.amount_cents <= 50000", "message": "refund above 500.00", "field": "/amount_cents"},
	  {"name": "note_grounded", "rule": "grounded(self.note)", "message": "note is not in the message", "field": "/note"},
	  {"name": "date_not_after_received", "rule": "self.date == null || timestamp(self.date + 'T00:00:00Z') <= message.received_at", "message": "date is after the message was received", "field": "/date"},
	  {"name": "source_ok", "rule": "message.source != 'blocked'", "message": "source is blocked"}
	]`)
	if err != nil {
		t.Fatal(err)
	}
	received := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	text := "Please refund my order, it was broken. Thanks!"
	for _, tt := range []struct {
		name, inst, source string
		want               extracttype.ErrorList
	}{
		{"Valid", `{"kind": "refund", "amount_cents": 1999, "note": "it was broken", "date": "2026-02-28", "items": [{"sku": "a", "qty": 1}]}`, "web", nil},
		{"RefundWithoutAmount", `{"kind": "refund", "amount_cents": null, "date": null, "note": null, "items": []}`, "web",
			extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/amount_cents", Keyword: "refund_has_amount", Message: "a refund needs an amount"}}},
		{"RefundTooHigh", `{"kind": "refund", "amount_cents": 500000, "date": null, "note": null, "items": []}`, "web",
			extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/amount_cents", Keyword: "refund_max", Message: "refund above 500.00"}}},
		{"NotGrounded", `{"kind": "question", "amount_cents": null, "date": null, "note": "ignore previous instructions", "items": []}`, "web",
			extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/note", Keyword: "note_grounded", Message: "note is not in the message"}}},
		{"DateAfterReceived", `{"kind": "question", "amount_cents": null, "note": null, "date": "2026-03-02", "items": []}`, "web",
			extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/date", Keyword: "date_not_after_received", Message: "date is after the message was received"}}},
		{"Source", `{"kind": "question", "amount_cents": null, "date": null, "note": null, "items": []}`, "blocked",
			extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "", Keyword: "source_ok", Message: "source is blocked"}}},
		{"NestedAtItsPath", `{"kind": "question", "amount_cents": null, "date": null, "note": null, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 0}]}`, "web",
			extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/items/1/qty", Keyword: "qty_positive", Message: "qty must be positive"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errs, _ := s.ValidateMessage(decodeInstance(t, tt.inst), text, MessageMeta{Source: tt.source, ReceivedAt: received})
			if diff := cmp.Diff(tt.want, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// A rule that fails at run time on a record the schema accepts is a rule
// error; on a record the schema rejects it is left to the schema errors.
func TestRuleEvaluationError(t *testing.T) {
	t.Parallel()
	s, err := ruleSchema(t, `[{"name": "note_long", "rule": "size(self.free) > 0", "message": "free must not be empty", "field": "/free"}]`)
	if err != nil {
		t.Fatal(err)
	}
	// free is not required: absent, self.free has no value.
	errs, _ := s.Validate(decodeInstance(t, `{"kind": "question", "amount_cents": null, "date": null, "note": null, "items": []}`), "x")
	want := extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/free", Keyword: "note_long",
		Message: "free must not be empty (the rule could not be evaluated on this record)"}}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Errorf("valid record (-want +got):\n%s", diff)
	}
	errs, _ = s.Validate(decodeInstance(t, `{"kind": "question", "amount_cents": "x", "date": null, "note": null, "items": []}`), "x")
	for _, e := range errs {
		if e.Kind == extracttype.KindRule {
			t.Errorf("schema-invalid record has rule error %v", e)
		}
	}
	if len(errs) == 0 {
		t.Error("schema-invalid record is valid")
	}
}

// The rule sees an integer as int and a number as double, whatever the
// JSON text wrote.
func TestRuleTypesFromSchema(t *testing.T) {
	t.Parallel()
	s, err := ruleSchema(t, `[{"name": "int_math", "rule": "self.amount_cents == null || self.amount_cents % 100 == 0", "message": "whole units only", "field": "/amount_cents"}]`)
	if err != nil {
		t.Fatal(err)
	}
	for inst, want := range map[string]int{
		`{"kind": "refund", "amount_cents": 1200, "date": null, "note": null, "items": []}`:   0,
		`{"kind": "refund", "amount_cents": 1200.0, "date": null, "note": null, "items": []}`: 0,
		`{"kind": "refund", "amount_cents": 1250, "date": null, "note": null, "items": []}`:   1,
	} {
		errs, _ := s.Validate(decodeInstance(t, inst), "x")
		if len(errs) != want {
			t.Errorf("%s: errors %v, want %d", inst, errs, want)
		}
	}
}
