package pipeline

import (
	"os"
	"strings"
	"testing"

	"github.com/extractq/extractq/extracttype"
)

func loadTestSchema(t testing.TB) *Schema {
	t.Helper()
	b, err := os.ReadFile("testdata/order.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := CompileSchema("order", b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decode(t testing.TB, s string) any {
	t.Helper()
	v, err := DecodeStrict([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

const orderText = "Hi, order 4821300017 never came. Account U85ALFLG2Z, mail czhang14@email.com, item AB-123 45 x2"

func TestSchemaValidate(t *testing.T) {
	t.Parallel()
	s := loadTestSchema(t)

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		errs, ev := s.Validate(decode(t, `{"intent":"status","order_id":"4821300017","account_id":"U85ALFLG2Z","email":"czhang14@email.com","items":[{"sku":"ab12345","qty":2}]}`), orderText)
		if len(errs) != 0 {
			t.Fatalf("errors: %v", errs)
		}
		if len(ev) != 4 {
			t.Fatalf("evidence: %+v", ev)
		}
	})

	t.Run("MissingRequiredAtPropertyPath", func(t *testing.T) {
		t.Parallel()
		errs, _ := s.Validate(decode(t, `{"intent":"status","account_id":null,"email":null,"items":[{"sku":"ab12345"}]}`), orderText)
		want := []string{"/items/0/qty", "/order_id"}
		if len(errs) != len(want) {
			t.Fatalf("got %v", errs)
		}
		for i, w := range want {
			if errs[i].Path != w || errs[i].Keyword != "required" || errs[i].Kind != extracttype.KindSchema {
				t.Errorf("error %d = %+v, want required at %s", i, errs[i], w)
			}
		}
		if errs[0].PathPattern() != "/items/*/qty" {
			t.Errorf("pattern %q", errs[0].PathPattern())
		}
	})

	t.Run("MessagesCarryNoValues", func(t *testing.T) {
		t.Parallel()
		errs, _ := s.Validate(decode(t, `{"intent":"SECRETINTENT","order_id":"SECRET123","account_id":"SECRETACCT","email":"SECRETMAIL","items":[],"Extra":1}`), orderText)
		if len(errs) == 0 {
			t.Fatal("no errors")
		}
		kinds := map[string]bool{}
		for _, e := range errs {
			if strings.Contains(e.Message, "SECRET") {
				t.Errorf("message carries a value: %+v", e)
			}
			kinds[e.Keyword] = true
		}
		for _, k := range []string{"enum", "pattern", "format", "additionalProperties", "grounded"} {
			if !kinds[k] {
				t.Errorf("no %s error in %v", k, errs)
			}
		}
	})

	t.Run("KeyDiffersOnlyByCase", func(t *testing.T) {
		t.Parallel()
		errs, _ := s.Validate(decode(t, `{"intent":"status","Order_ID":"4821300017","order_id":null,"account_id":null,"email":null,"items":[{"SKU":"ab12345","sku":"ab12345","qty":1}]}`), orderText)
		if len(errs) != 2 || errs[0].Path != "/Order_ID" || errs[0].Keyword != "property_case" || errs[1].Path != "/items/0/SKU" {
			t.Fatalf("got %v", errs)
		}
	})

	t.Run("WrongType", func(t *testing.T) {
		t.Parallel()
		errs, _ := s.Validate(decode(t, `{"intent":"status","order_id":4821300017,"account_id":null,"email":null,"items":[]}`), orderText)
		if len(errs) != 1 || errs[0].Path != "/order_id" || errs[0].Keyword != "type" {
			t.Fatalf("got %v", errs)
		}
	})

	t.Run("ModelSchemaHasNoAnnotations", func(t *testing.T) {
		t.Parallel()
		if strings.Contains(string(s.ModelSchema()), "x-grounded") || strings.Contains(string(s.ModelSchema()), "$id") {
			t.Fatalf("annotations sent to the model: %s", s.ModelSchema())
		}
	})
}

func TestCompileSchemaErrors(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"NotJSON":   `{`,
		"NoID":      `{"x-version":"1"}`,
		"NoVersion": `{"$id":"https://x.test/a.json"}`,
		"BadSchema": `{"$id":"https://x.test/a.json","x-version":"1","type":"nope"}`,
	} {
		if _, err := CompileSchema(name, []byte(doc)); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}

// TestValidateField: one field's value is checked against its subschema
// alone; the record's other fields, valid or not, add no errors.
func TestValidateField(t *testing.T) {
	s := loadTestSchema(t)
	rec := decode(t, `{"intent": "nope", "order_id": null}`).(map[string]any) // other fields bad or missing
	for _, c := range []struct {
		name, value string
		want        []string // paths
	}{
		{"intent", `"refund"`, nil},
		{"intent", `"maybe"`, []string{"/intent"}},
		{"intent", `{"a": 1}`, []string{"/intent"}},
		{"order_id", `null`, nil},
		{"order_id", `12`, []string{"/order_id"}},
		{"items", `[{"sku": "AB-1", "qty": 0}]`, []string{"/items/0/qty"}},
		{"items", `"AB-1"`, []string{"/items"}},
	} {
		got := s.ValidateField(rec, c.name, decode(t, c.value))
		var paths []string
		for _, e := range got {
			paths = append(paths, e.Path)
		}
		if strings.Join(paths, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s = %s: errors %v, want at %v", c.name, c.value, got, c.want)
		}
	}
	if got := s.ValidateField(nil, "intent", "status"); got != nil {
		t.Errorf("no record: %v", got)
	}
}
