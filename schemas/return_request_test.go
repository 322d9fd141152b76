package schemas

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
)

const returnRequest = "return_request.v1.json"

// groupNames are return_request's object-valued properties: never null.
var groupNames = []string{"customer", "order", "refund", "shipping"}

// rrProperty is the part of a return_request subschema the shape test
// reads.
type rrProperty struct {
	Type                 any                        `json:"type"`
	Enum                 []any                      `json:"enum"`
	Grounded             *bool                      `json:"x-grounded"`
	Keywords             map[string][]string        `json:"x-keywords"`
	AdditionalProperties *bool                      `json:"additionalProperties"`
	Required             []string                   `json:"required"`
	Properties           map[string]json.RawMessage `json:"properties"`
	Items                json.RawMessage            `json:"items"`
}

func loadReturnRequest(t *testing.T) *pipeline.Schema {
	t.Helper()
	s, err := pipeline.LoadSchema(FS, "return_request", returnRequest)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReturnRequestShape checks the decisions the schema's description
// states: objects closed and fully required everywhere, leaves nullable
// but intent, the groups and items never null, the grounded fields, and
// the enums drawn from customer_message.
func TestReturnRequestShape(t *testing.T) {
	t.Parallel()

	c := newCompiler(t)
	if _, err := c.Compile(returnRequest); err != nil {
		t.Fatalf("compile with format assertions: %v", err)
	}
	s := loadReturnRequest(t)
	if s.URL != "https://extractq.dev/schemas/return_request/v1.json" || s.Version != "1" {
		t.Errorf("$id %q, x-version %q", s.URL, s.Version)
	}

	b, err := FS.ReadFile(returnRequest)
	if err != nil {
		t.Fatal(err)
	}
	var root rrProperty
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	var grounded []string
	var walk func(path string, p rrProperty)
	walk = func(path string, p rrProperty) {
		if p.Grounded != nil {
			if !*p.Grounded {
				t.Errorf("%s: x-grounded false: leave it out instead", path)
			}
			grounded = append(grounded, path)
		}
		types, _ := p.Type.([]any)
		nullable := slices.Contains(types, any("null"))
		if nullable && p.Enum != nil && !slices.Contains(p.Enum, nil) {
			t.Errorf("%s: nullable but null is not in its enum", path)
		}
		if p.Properties != nil {
			if p.AdditionalProperties == nil || *p.AdditionalProperties {
				t.Errorf("%s: want additionalProperties false", path)
			}
			var names []string
			for k := range p.Properties {
				names = append(names, k)
			}
			slices.Sort(names)
			req := slices.Clone(p.Required)
			slices.Sort(req)
			if !slices.Equal(names, req) {
				t.Errorf("%s: required %v, properties %v", path, req, names)
			}
			for k, raw := range p.Properties {
				var c rrProperty
				if err := json.Unmarshal(raw, &c); err != nil {
					t.Fatalf("%s/%s: %v", path, k, err)
				}
				walk(path+"/"+k, c)
			}
			return
		}
		if p.Items != nil {
			var c rrProperty
			if err := json.Unmarshal(p.Items, &c); err != nil {
				t.Fatalf("%s/*: %v", path, err)
			}
			walk(path+"/*", c)
			return
		}
		// A leaf: nullable, but intent.
		if want := path != "/intent"; nullable != want {
			t.Errorf("%s: type %v, nullable %v, want %v", path, p.Type, nullable, want)
		}
	}
	walk("", root)

	for _, g := range append(slices.Clone(groupNames), "items") {
		var p rrProperty
		if err := json.Unmarshal(root.Properties[g], &p); err != nil {
			t.Fatal(err)
		}
		if p.Type != "object" && p.Type != "array" {
			t.Errorf("/%s: type %v, want object or array, never null", g, p.Type)
		}
	}

	sort.Strings(grounded)
	want := []string{"/customer/account_id", "/customer/email", "/customer/full_name", "/customer/phone",
		"/customer/username", "/order/order_id", "/shipping/city", "/shipping/street_address", "/shipping/zip_code"}
	if !slices.Equal(grounded, want) {
		t.Errorf("grounded %v, want %v", grounded, want)
	}

	// Enums reuse customer_message's values.
	cmRaw, cm := readRaw(t, customerMessage)
	var cmProducts struct {
		Items struct {
			Enum []any `json:"enum"`
		} `json:"items"`
	}
	if err := json.Unmarshal(cmRaw.Properties["product_names"], &cmProducts); err != nil {
		t.Fatal(err)
	}
	var intent rrProperty
	if err := json.Unmarshal(root.Properties["intent"], &intent); err != nil {
		t.Fatal(err)
	}
	for _, in := range intent.Enum {
		if in != "other" && !slices.Contains(cm["intent"].Enum, in) {
			t.Errorf("intent %v is not a customer_message intent", in)
		}
	}
	if !slices.Contains(intent.Enum, any("other")) {
		t.Error(`intent has no "other"`)
	}
	for in := range intent.Keywords {
		if !slices.Contains(intent.Enum, any(in)) {
			t.Errorf("x-keywords: %q is not an intent", in)
		}
	}
	var items struct {
		Items struct {
			Properties map[string]rrProperty `json:"properties"`
		} `json:"items"`
	}
	if err := json.Unmarshal(root.Properties["items"], &items); err != nil {
		t.Fatal(err)
	}
	product := items.Items.Properties["product"]
	if got, want := slices.DeleteFunc(slices.Clone(product.Enum), func(v any) bool { return v == nil }), cmProducts.Items.Enum; !slices.Equal(got, want) {
		t.Errorf("product enum %v, want customer_message's product names %v", got, want)
	}
	problem := items.Items.Properties["problem"]
	for v := range problem.Keywords {
		if !slices.Contains(problem.Enum, any(v)) {
			t.Errorf("problem x-keywords: %q is not a problem", v)
		}
	}
}

// rrText is a hand-made message in the style of the ABCD sample.
const rrText = "Hi, my name is Albert Sanders and my order ID is 0800317848\n" +
	"I got two guess jeans in the wrong size and a Michael Kors Jacket with a stain on it\n" +
	"asanders869@email.com\nUsername: asanders869\nphone (720) 986-4183, account id U85ALFLG2Z\n" +
	"I am a silver member\n7640 Circle Drive  Brighton, TX 3155\nPlease refund the $84.50 to my credit card"

// rrValid returns a valid record of rrText.
func rrValid() map[string]any {
	return map[string]any{
		"intent": "return_size",
		"customer": map[string]any{"full_name": "Albert Sanders", "email": "asanders869@email.com",
			"account_id": "U85ALFLG2Z", "username": "asanders869", "phone": "(720) 986-4183"},
		"order": map[string]any{"order_id": "0800317848", "purchase_date": "2020-02-25", "membership_level": "silver"},
		"items": []any{
			map[string]any{"product": "guess jeans", "problem": "wrong_size", "quantity": json.Number("2")},
			map[string]any{"product": "michael kors jacket", "problem": "stain", "quantity": nil},
		},
		"refund":   map[string]any{"amount": "84.50", "method": "credit_card"},
		"shipping": map[string]any{"street_address": "7640 Circle Drive", "city": "Brighton", "state": "tx", "zip_code": "3155"},
	}
}

// rrEmpty returns the record of a message that states nothing: the groups
// are objects of nulls, items is empty.
func rrEmpty() map[string]any {
	return map[string]any{
		"intent":   "other",
		"customer": map[string]any{"full_name": nil, "email": nil, "account_id": nil, "username": nil, "phone": nil},
		"order":    map[string]any{"order_id": nil, "purchase_date": nil, "membership_level": nil},
		"items":    []any{},
		"refund":   map[string]any{"amount": nil, "method": nil},
		"shipping": map[string]any{"street_address": nil, "city": nil, "state": nil, "zip_code": nil},
	}
}

func at(m map[string]any, group string) map[string]any { return m[group].(map[string]any) }

func item(m map[string]any, i int) map[string]any { return m["items"].([]any)[i].(map[string]any) }

// TestReturnRequestValidate checks hand-made records with the pipeline's
// validator: valid ones pass with their evidence, and each bad one is
// reported at its nested JSON Pointer with the keyword that failed.
func TestReturnRequestValidate(t *testing.T) {
	t.Parallel()

	s := loadReturnRequest(t)
	errs, ev := s.Validate(any(rrValid()), rrText)
	if len(errs) > 0 {
		t.Fatalf("valid record rejected:\n%v", errs)
	}
	if len(ev) != 9 {
		t.Errorf("evidence for %d grounded values, want 9: %v", len(ev), ev)
	}
	if errs, _ := s.Validate(any(rrEmpty()), "hello"); len(errs) > 0 {
		t.Fatalf("all-null record rejected:\n%v", errs)
	}

	tests := []struct {
		name     string
		edit     func(m map[string]any)
		wantPath string
		wantKind extracttype.Kind
		wantKw   string
	}{
		{"QuantityZero", func(m map[string]any) { item(m, 0)["quantity"] = json.Number("0") }, "/items/0/quantity", extracttype.KindSchema, "minimum"},
		{"QuantityString", func(m map[string]any) { item(m, 0)["quantity"] = "2" }, "/items/0/quantity", extracttype.KindSchema, "type"},
		{"QuantityFraction", func(m map[string]any) { item(m, 1)["quantity"] = json.Number("1.5") }, "/items/1/quantity", extracttype.KindSchema, "type"},
		{"QuantityMissing", func(m map[string]any) { delete(item(m, 1), "quantity") }, "/items/1/quantity", extracttype.KindSchema, "required"},
		{"ProblemUnknown", func(m map[string]any) { item(m, 1)["problem"] = "dirty" }, "/items/1/problem", extracttype.KindSchema, "enum"},
		{"ProductCase", func(m map[string]any) { item(m, 0)["product"] = "Guess Jeans" }, "/items/0/product", extracttype.KindSchema, "enum"},
		{"ItemExtra", func(m map[string]any) { item(m, 0)["size"] = "9" }, "/items/0/size", extracttype.KindSchema, "additionalProperties"},
		{"ItemsNull", func(m map[string]any) { m["items"] = nil }, "/items", extracttype.KindSchema, "type"},
		{"CustomerNull", func(m map[string]any) { m["customer"] = nil }, "/customer", extracttype.KindSchema, "type"},
		{"EmailFormat", func(m map[string]any) { at(m, "customer")["email"] = "asanders869.email.com" }, "/customer/email", extracttype.KindSchema, "format"},
		{"EmailInvented", func(m map[string]any) { at(m, "customer")["email"] = "asanders870@email.com" }, "/customer/email", extracttype.KindRule, "grounded"},
		{"OrderIDNumber", func(m map[string]any) { at(m, "order")["order_id"] = json.Number("800317848") }, "/order/order_id", extracttype.KindSchema, "type"},
		{"OrderIDPadded", func(m map[string]any) { at(m, "order")["order_id"] = "00800317848" }, "/order/order_id", extracttype.KindSchema, "pattern"},
		{"DateFormat", func(m map[string]any) { at(m, "order")["purchase_date"] = "2020-02-30" }, "/order/purchase_date", extracttype.KindSchema, "format"},
		{"DateInTheFuture", func(m map[string]any) {
			at(m, "order")["purchase_date"] = time.Now().AddDate(0, 0, 2).Format(time.DateOnly)
		}, "/order/purchase_date", extracttype.KindRule, "purchase_date_not_after_received"},
		{"RefundInjected", func(m map[string]any) { at(m, "refund")["amount"] = "5000" }, "/refund/amount", extracttype.KindRule, "refund_amount_max"},
		{"RefundZero", func(m map[string]any) { at(m, "refund")["amount"] = "0" }, "/refund/amount", extracttype.KindRule, "refund_amount_positive"},
		{"DateMissing", func(m map[string]any) { delete(at(m, "order"), "purchase_date") }, "/order/purchase_date", extracttype.KindSchema, "required"},
		{"RefundDollarSign", func(m map[string]any) { at(m, "refund")["amount"] = "$84.50" }, "/refund/amount", extracttype.KindSchema, "pattern"},
		{"RefundMethod", func(m map[string]any) { at(m, "refund")["method"] = "paypal" }, "/refund/method", extracttype.KindSchema, "enum"},
		{"ZipPadded", func(m map[string]any) { at(m, "shipping")["zip_code"] = "03155" }, "/shipping/zip_code", extracttype.KindRule, "grounded"},
		{"ZipTooLong", func(m map[string]any) { at(m, "shipping")["zip_code"] = "315566" }, "/shipping/zip_code", extracttype.KindSchema, "pattern"},
		{"StreetNoNumber", func(m map[string]any) { at(m, "shipping")["street_address"] = "Circle Drive" }, "/shipping/street_address", extracttype.KindSchema, "pattern"},
		{"IntentNull", func(m map[string]any) { m["intent"] = nil }, "/intent", extracttype.KindSchema, "type"},
		{"IntentOutOfScope", func(m map[string]any) { m["intent"] = "recover_password" }, "/intent", extracttype.KindSchema, "enum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := rrValid()
			tt.edit(m)
			errs, _ := s.Validate(any(m), rrText)
			found := false
			for _, e := range errs {
				if e.Path == tt.wantPath && e.Kind == tt.wantKind && e.Keyword == tt.wantKw {
					found = true
				}
			}
			if !found {
				t.Errorf("want %s %s at %s, got:\n%v", tt.wantKind, tt.wantKw, tt.wantPath, errs)
			}
		})
	}
}

// TestReturnRequestABCD builds a record from the ground truth of every
// ABCD sample message whose intent the schema covers (unstated fields
// null, a product named n times one item of quantity n) and validates it
// against the schema alone: the labels are normalised, not all grounded.
func TestReturnRequestABCD(t *testing.T) {
	t.Parallel()

	s := loadReturnRequest(t)
	intents := map[string]bool{}
	var intent struct {
		Enum []string `json:"enum"`
	}
	raw, _ := readRaw(t, returnRequest)
	if err := json.Unmarshal(raw.Properties["intent"], &intent); err != nil {
		t.Fatal(err)
	}
	for _, in := range intent.Enum {
		intents[in] = true
	}

	f, err := os.Open(filepath.Join("..", "testdata", "abcd", "messages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	checked, withItems := 0, 0
	for sc.Scan() {
		var r abcdRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		var in string
		if raw, ok := r.Expected["intent"]; !ok || json.Unmarshal(raw, &in) != nil || !intents[in] {
			continue
		}
		m := rrEmpty()
		m["intent"] = in
		str := func(k string) any {
			var v string
			if raw, ok := r.Expected[k]; ok && json.Unmarshal(raw, &v) == nil {
				return v
			}
			return nil
		}
		for _, k := range []string{"full_name", "email", "account_id", "username", "phone"} {
			at(m, "customer")[k] = str(k)
		}
		for _, k := range []string{"order_id", "purchase_date", "membership_level"} {
			at(m, "order")[k] = str(k)
		}
		for _, k := range []string{"street_address", "city", "state", "zip_code"} {
			at(m, "shipping")[k] = str(k)
		}
		at(m, "refund")["amount"] = str("refund_amount")
		var products []string
		if raw, ok := r.Expected["product_names"]; ok {
			_ = json.Unmarshal(raw, &products)
		}
		var items []any
		for i, p := range products {
			if slices.Index(products, p) != i {
				continue
			}
			var q any
			if n := countOf(products, p); n > 1 {
				q = json.Number(itoa(n))
			}
			items = append(items, map[string]any{"product": p, "problem": nil, "quantity": q})
		}
		if len(items) > 0 {
			m["items"] = items
			withItems++
		}
		checked++
		if errs, _ := s.Validate(any(m), r.Text); hasSchemaError(errs) {
			t.Errorf("%s:\n%v", r.ID, errs)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 300 || withItems == 0 {
		t.Errorf("checked %d records, %d with items: want at least 300 and some items", checked, withItems)
	}
	t.Logf("%d ABCD records with a covered intent validated, %d with items", checked, withItems)
}

func hasSchemaError(errs extracttype.ErrorList) bool {
	for _, e := range errs {
		if e.Kind == extracttype.KindSchema {
			return true
		}
	}
	return false
}

func countOf(list []string, v string) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
