package eval

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/pipeline"
)

const testSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://extractq.dev/schemas/eval_test/v1.json",
  "x-version": "1",
  "type": "object",
  "properties": {
    "order_id": {"type": ["string", "null"], "x-grounded": true},
    "name": {"type": ["string", "null"], "x-grounded": true, "x-eval": {"normalize": ["case", "space"]}},
    "intent": {"type": "string"},
    "amount": {"type": ["string", "null"]},
    "products": {"type": ["array", "null"], "items": {"type": "string"}}
  }
}`

func testFields(t *testing.T, spec string) (*pipeline.Schema, []Field) {
	t.Helper()
	s, err := pipeline.CompileSchema("eval_test", []byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ReadSpec(strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Fields(s, sp)
	if err != nil {
		t.Fatal(err)
	}
	return s, fs
}

func outcomeOf(t *testing.T, sc *Scored, key, field string) Outcome {
	t.Helper()
	for i, k := range sc.Keys {
		if strings.HasSuffix(k, "\x00"+key) {
			for j, f := range sc.Fields {
				if f.Name == field {
					return sc.Outcomes[i][j]
				}
			}
		}
	}
	t.Fatalf("no outcome for %s %s", key, field)
	return 0
}

// The label semantics of docs/eval.md, one case each.
func TestScoreSemantics(t *testing.T) {
	schema, fields := testFields(t, "fields:\n  amount: {normalize: [number]}\n")
	labels, err := ReadLabels(strings.NewReader(`
{"id":"tp","expected":{"order_id":"1234567890","intent":"refund"}}
{"id":"miss","expected":{"order_id":"1234567890"}}
{"id":"fp","expected":{"order_id":null}}
{"id":"wrong","expected":{"order_id":"1234567890","intent":"refund"}}
{"id":"tn","expected":{"order_id":null}}
{"id":"notintext","expected":{"order_id":"5555555555"}}
{"id":"notintext-fp","expected":{"order_id":"5555555555"}}
{"id":"sample-form","expected":{"name":"Albert Sanders"},"expected_in_text":[]}
{"id":"norm","expected":{"name":"Albert  SANDERS","amount":"$40","products":["b","a"]},"expected_in_text":["name"]}
{"id":"unmatched","expected":{"order_id":"1"}}
{"id":"extra","expected":{"intent_detail":"x"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	text := "my order 1234567890 please"
	rec := func(s string) json.RawMessage { return json.RawMessage(s) }
	preds := []Prediction{
		{ExternalID: "tp", Text: text, Record: rec(`{"order_id":"1234567890","intent":"refund"}`)},
		{ExternalID: "miss", Text: text, Record: rec(`{"order_id":null}`)},
		{ExternalID: "fp", Text: text, Record: rec(`{"order_id":"1234567890"}`)},
		{ExternalID: "wrong", Text: text, Record: rec(`{"order_id":"1234567899","intent":"cancel"}`)},
		{ExternalID: "tn", Text: text, Record: nil},
		{ExternalID: "notintext", Text: text, Record: rec(`{"order_id":null}`)},
		{ExternalID: "notintext-fp", Text: text, Record: rec(`{"order_id":"5555555555"}`)},
		{ExternalID: "sample-form", Text: "I am Albert Sanders", Record: rec(`{"name":null}`)},
		{ExternalID: "norm", Text: "x", Record: rec(`{"name":"albert sanders","amount":"40.00","products":["a","b"]}`)},
		{ExternalID: "extra", Text: text, Record: rec(`{}`)},
	}
	sc, err := Score(schema, fields, labels, preds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, field string
		want       Outcome
	}{
		{"tp", "order_id", TP}, {"tp", "intent", TP}, {"tp", "name", Unlabelled},
		{"miss", "order_id", FN},
		{"fp", "order_id", FP},
		{"wrong", "order_id", Wrong}, {"wrong", "intent", Wrong},
		{"tn", "order_id", TN},
		// grounded, expected value not in the text: expected null
		{"notintext", "order_id", TN}, {"notintext-fp", "order_id", FP},
		// expected_in_text decides over the text
		{"sample-form", "name", TN},
		{"norm", "name", TP}, {"norm", "amount", TP}, {"norm", "products", TP},
	} {
		if got := outcomeOf(t, sc, c.key, c.field); got != c.want {
			t.Errorf("%s %s = %d, want %d", c.key, c.field, got, c.want)
		}
	}
	if sc.Labels != 11 || sc.Matched != 10 || sc.NoRecord != 1 {
		t.Errorf("labels %d matched %d no record %d, want 11, 10, 1", sc.Labels, sc.Matched, sc.NoRecord)
	}
	if len(sc.NotInSchema) != 1 || sc.NotInSchema[0] != "intent_detail" {
		t.Errorf("not in schema = %v, want [intent_detail]", sc.NotInSchema)
	}

	// The switch: raw labels score the value not in the text as expected.
	raw, err := Score(schema, fields, labels, preds, Options{RawLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]Outcome{"notintext": FN, "notintext-fp": TP, "sample-form": FN} {
		field := "order_id"
		if key == "sample-form" {
			field = "name"
		}
		if got := outcomeOf(t, raw, key, field); got != want {
			t.Errorf("raw labels: %s = %d, want %d", key, got, want)
		}
	}

	// Without normalisation the same values differ.
	_, plain := testFields(t, "fields:\n  name: {normalize: []}\n")
	sc2, err := Score(schema, plain, labels, preds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomeOf(t, sc2, "norm", "name"); got != Wrong {
		t.Errorf("name without normalisation = %d, want Wrong", got)
	}

	r := NewReport(Batch{ID: "b"}, sc, Options{})
	var oid FieldResult
	for _, f := range r.Fields {
		if f.Field == "order_id" {
			oid = f
		}
	}
	// order_id: tp, miss(FN), fp, wrong(FP+FN), tn, notintext(TN), notintext-fp(FP)
	want := Counts{N: 7, TP: 1, FP: 3, FN: 2, TN: 2, Wrong: 1}
	if oid.Counts != want {
		t.Errorf("order_id counts = %+v, want %+v", oid.Counts, want)
	}
	if math.Abs(oid.Precision.Value-0.25) > 1e-9 || math.Abs(oid.Recall.Value-1.0/3) > 1e-9 || math.Abs(oid.Exact.Value-3.0/7) > 1e-9 {
		t.Errorf("order_id precision %v recall %v exact %v, want 1/4, 1/3, 3/7", oid.Precision, oid.Recall, oid.Exact)
	}
}

// goInternals are words of Go's decoders that no error of eval's inputs
// may show.
var goInternals = []string{"Go value", "Go struct", "labelLine", "unmarshal", "struct {", "json:", "yaml:"}

func checkNoGoInternals(t *testing.T, what string, err error) {
	t.Helper()
	for _, w := range goInternals {
		if strings.Contains(err.Error(), w) {
			t.Errorf("%s: the error shows Go's %q: %v", what, w, err)
		}
	}
}

// TestLabelErrors: each bad labels line is an error naming the line, the
// byte where the JSON goes wrong or the key, and what was expected, in
// the product's words.
func TestLabelErrors(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"expected":{}}`: `line 1: no "id"`,
		`{"id":"a"}`:      `line 1 (id "a"): "expected" is not a JSON object (missing): want the expected record`,
		"{\"id\":\"a\",\"expected\":{}}\n\n{\"id\":\"a\",\"expected\":{}}": "line 3: id \"a\" (source \"\") is labelled on line 1 too",
		`nope`:  "line 1, byte 2: not valid JSON",
		``:      "no labelled line",
		`[1,2]`: `line 1: an array, not a JSON object: each line is one object with "id" and "expected"`,
		`{"id":"a","expected":{},"expected_in_text":"full_name"}`:               `line 1 (id "a"): "expected_in_text" is a string, want an array of the "expected" keys`,
		`{"id":"a","expected":{},"expected_in_text":[1]}`:                       `"expected_in_text" item 0 is a number (1), want a key of "expected"`,
		`{"id":"a","expected":{},"expected_in_text":["nosuchkey"]}`:             `"expected_in_text" names "nosuchkey", which is not a key of "expected"`,
		"{\"id\":\"a\",\"expected\":{}}\n" + `{"id":"b","expected":{"name":"x"`: "line 2, byte 32: the line ends before its JSON object does",
		`{"id":"a","expected":{}} {}`:                                           "line 1, byte 26: more follows the line's JSON object",
		`{"id":5,"expected":{}}`:                                                `line 1: "id" is a number (5), want a string`,
	} {
		_, err := ReadLabels(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadLabels(%q) = %v, want an error with %q", in, err, want)
			continue
		}
		checkNoGoInternals(t, in, err)
	}

	s, _ := pipeline.CompileSchema("eval_test", []byte(testSchema))
	for in, want := range map[string]string{
		"fields:\n  a: {normalize: [upper]}\n":      `eval spec line 2: fields.a.normalize: "upper" is not one of`,
		"fields:\n  name:\n    normalise: [case]\n": `eval spec line 3: fields.name: unknown key "normalise": the only key is normalize`,
		"field: {}\n":                                        `eval spec line 1: unknown key "field": the only key is fields`,
		"fields:\n  name: {normalize: case}\n":               `eval spec line 2: fields.name.normalize is the value "case", want a list of case, space`,
		"fields:\n  name: {}\n  name: {}\n":                  "eval spec line 3: fields.name is given twice (line 2 too)",
		"fields:\n  name: {}\n  nope: {normalize: [case]}\n": `eval spec line 3: field "nope" is not a property of schema eval_test (its properties: amount, intent, name, order_id, products)`,
	} {
		sp, err := ReadSpec(strings.NewReader(in))
		if err == nil {
			_, err = Fields(s, sp)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("spec %q: %v, want an error with %q", in, err, want)
			continue
		}
		checkNoGoInternals(t, in, err)
	}
	// A spec file is named in its errors, a field's too.
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte("fields:\n  nope: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sp, err := ReadSpecFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fields(s, sp); err == nil || !strings.Contains(err.Error(), path+` line 2: field "nope" is not a property`) {
		t.Errorf("a spec file naming no property: %v, want its name and line", err)
	}
}

// TestImpossibleLabels: a labelled value no valid record can hold (the
// wrong type, null for a field never null, outside an enum) is refused
// with its line and key; values normalisation makes valid are not.
func TestImpossibleLabels(t *testing.T) {
	t.Parallel()
	const enumSchema = `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://extractq.dev/schemas/enum_test/v1.json", "x-version": "1", "type": "object",
	  "properties": {"intent": {"type": "string", "enum": ["refund", "cancel"]},
	    "level": {"type": ["string", "null"], "enum": ["gold", "silver", null], "x-eval": {"normalize": ["case"]}},
	    "amount": {"type": ["number", "null"], "x-eval": {"normalize": ["number"]}},
	    "count": {"type": "integer"},
	    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}}}`
	s, err := pipeline.CompileSchema("enum_test", []byte(enumSchema))
	if err != nil {
		t.Fatal(err)
	}
	fields, err := Fields(s, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"intent": 5}`:        `labels line 1 (id "x"): expected "intent" is a number (5): the schema wants a string, one of "refund", "cancel" for intent`,
		`{"intent": null}`:     `expected "intent" is null: the schema wants a string`,
		`{"intent": "nosuch"}`: `expected "intent" is a string: the schema wants a string, one of "refund", "cancel" for intent`,
		`{"level": "bronze"}`:  `expected "level" is a string: the schema wants a string or null, one of "gold", "silver" for level`,
		`{"count": 1.5}`:       `expected "count" is a number (1.5): the schema wants an integer for count`,
		`{"tags": ["a", "c"]}`: `expected "tags" item 1 is a string: the schema wants a string, one of "a", "b" for each item of tags`,
		`{"tags": "a"}`:        `expected "tags" is a string: the schema wants an array for tags`,
	} {
		labels, err := ReadLabels(strings.NewReader(`{"id": "x", "expected": ` + in + `}`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Score(s, fields, labels, nil, Options{})
		if _, ok := err.(*LabelError); !ok || !strings.Contains(err.Error(), want) {
			t.Errorf("label %s: %v, want a *LabelError with %q", in, err, want)
		}
	}
	for _, in := range []string{`{"intent": "refund", "level": "Gold", "amount": "$1,200.50", "count": 3, "tags": ["b"], "other": 5}`,
		`{"level": null, "amount": null, "count": 2.0}`} {
		labels, err := ReadLabels(strings.NewReader(`{"id": "x", "expected": ` + in + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Score(s, fields, labels, nil, Options{}); err != nil {
			t.Errorf("label %s: %v, want it taken", in, err)
		}
	}
}

// Reference values worked by hand from the formulas: Wilson 95% for 8/10
// is [0.4902, 0.9433] and for 0/10 [0, 0.2775]; McNemar exact for 1 and 9
// discordant pairs is 2*(C(10,0)+C(10,1))/2^10 = 22/1024.
func TestStatistics(t *testing.T) {
	w := Wilson(8, 10)
	if math.Abs(w.Low-0.4902) > 1e-4 || math.Abs(w.High-0.9433) > 1e-4 {
		t.Errorf("Wilson(8, 10) = [%.4f, %.4f], want [0.4902, 0.9433]", w.Low, w.High)
	}
	if w := Wilson(0, 10); w.Low != 0 || math.Abs(w.High-0.2775) > 1e-4 {
		t.Errorf("Wilson(0, 10) = [%.4f, %.4f], want [0, 0.2775]", w.Low, w.High)
	}
	if p := McNemarExact(1, 9); math.Abs(p-22.0/1024) > 1e-12 {
		t.Errorf("McNemarExact(1, 9) = %v, want %v", p, 22.0/1024)
	}
	if p := McNemarExact(0, 0); p != 1 {
		t.Errorf("McNemarExact(0, 0) = %v, want 1", p)
	}
	if got := holm([]float64{0.01, 0.04, 0.03}, 0.05); !got[0] || got[1] || got[2] {
		t.Errorf("holm = %v, want only the first (0.01 <= 0.05/3; 0.03 > 0.05/2)", got)
	}
	outs := []Outcome{TP, TP, TP, FN, FP, TN, TP, Wrong}
	a, b := f1Bootstrap(outs), f1Bootstrap(outs)
	if a != b || !(a.Low <= a.Value && a.Value <= a.High) {
		t.Errorf("f1Bootstrap = %+v then %+v, want the same interval around the value", a, b)
	}
}
