package triage

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

func schemaDoc(t *testing.T, id, file string) (*pipeline.Schema, schemaNode) {
	t.Helper()
	s, err := pipeline.LoadSchema(schemas.FS, id, file)
	if err != nil {
		t.Fatal(err)
	}
	var doc schemaNode
	if err := json.Unmarshal(s.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	return s, doc
}

func TestForm(t *testing.T) {
	t.Parallel()

	t.Run("NestedRecordRoundTrips", func(t *testing.T) {
		t.Parallel()
		_, doc := schemaDoc(t, "return_request", "return_request.v1.json")
		rec, err := pipeline.DecodeStrict([]byte(`{"intent":"refund_initiate",
			"customer":{"full_name":"Rodriguez Domingo","email":"rd542657@email.com","account_id":null,"username":"rd542657","phone":null},
			"order":{"order_id":"3764775976","purchase_date":null,"membership_level":"gold"},
			"items":[{"product":"guess jacket","problem":"stain","quantity":2},{"product":null,"problem":null,"quantity":1}],
			"refund":{"amount":"84","method":"credit card"},
			"shipping":{"street_address":null,"city":null,"state":null,"zip_code":null},
			"surprise":{"x":[1,2]}}`))
		if err != nil {
			t.Fatal(err)
		}
		f, rest := BuildForm(doc, rec, extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/items/1/quantity", Message: "m"}, {Path: "/nowhere", Message: "n"}}, nil)
		if len(rest) != 1 || rest[0].Path != "/nowhere" {
			t.Errorf("unplaced = %+v", rest)
		}
		v := formValues(f)
		back, errs := parseForm(doc, v)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if !reflect.DeepEqual(back, rec) {
			a, _ := json.Marshal(back)
			b, _ := json.Marshal(rec)
			t.Errorf("round trip:\n got %s\nwant %s", a, b)
		}
	})

	t.Run("EmptyMeansNullAndWrongTypesStayExact", func(t *testing.T) {
		t.Parallel()
		s, doc := schemaDoc(t, "customer_message", "customer_message.v1.json")
		rec, _ := pipeline.DecodeStrict([]byte(`{"intent":"refund_status","order_id":1234567890,"Order_ID":"x"}`))
		f, _ := BuildForm(doc, rec, nil, nil)
		v := formValues(f)
		if v.Get("j:/order_id") != "1234567890" || v.Get("j:/Order_ID") != `"x"` {
			t.Fatalf("wrongly typed or extra values not in JSON boxes: %v", v)
		}
		v.Set("v:/city", "") // empty nullable: null
		v.Set("v:/refund_amount", "12.50")
		back, errs := parseForm(doc, v)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		m := back.(map[string]any)
		if m["city"] != nil || m["refund_amount"] != "12.50" || m["order_id"] != json.Number("1234567890") || m["Order_ID"] != "x" {
			t.Errorf("parsed = %#v", m)
		}
		errs, _ = s.Validate(back, "order 1234567890")
		var kinds []string
		for _, e := range errs {
			kinds = append(kinds, e.Path+":"+e.Keyword)
		}
		if got := strings.Join(kinds, " "); !strings.Contains(got, "/order_id:type") || !strings.Contains(got, "/Order_ID:property_case") {
			t.Errorf("validator errors = %s", got)
		}
		// An extra key emptied in its box is removed.
		v.Set("j:/Order_ID", "")
		back, _ = parseForm(doc, v)
		if _, ok := back.(map[string]any)["Order_ID"]; ok {
			t.Error("emptied extra key kept")
		}
		v.Set("j:/order_id", "{bad")
		if _, errs := parseForm(doc, v); len(errs) != 1 || errs[0].Path != "/order_id" || errs[0].Kind != extracttype.KindParse {
			t.Errorf("bad JSON box: %+v", errs)
		}
	})

	t.Run("ArrayButtons", func(t *testing.T) {
		t.Parallel()
		_, doc := schemaDoc(t, "return_request", "return_request.v1.json")
		rec, _ := pipeline.DecodeStrict([]byte(`{"items":[{"product":null,"problem":"stain","quantity":1}]}`))
		rec, err := applyArrayOp(doc, rec, "add:/items")
		if err != nil {
			t.Fatal(err)
		}
		items := rec.(map[string]any)["items"].([]any)
		if len(items) != 2 || !reflect.DeepEqual(items[1], map[string]any{"product": nil, "problem": nil, "quantity": nil}) {
			t.Fatalf("after add: %#v", items)
		}
		rec, err = applyArrayOp(doc, rec, "del:/items/0")
		if err != nil {
			t.Fatal(err)
		}
		if items := rec.(map[string]any)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["problem"] != nil {
			t.Errorf("after del: %#v", items)
		}
		for _, bad := range []string{"del:/items/7", "add:/nope", "zap:/items", "del:/items/x"} {
			if _, err := applyArrayOp(doc, rec, bad); err == nil {
				t.Errorf("%s: no error", bad)
			}
		}
		sk := skeleton(doc, doc).(map[string]any)
		if _, ok := sk["customer"].(map[string]any); !ok || sk["items"] == nil {
			t.Errorf("skeleton = %#v", sk)
		}
	})
}
