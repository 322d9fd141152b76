package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFieldPath(t *testing.T) {
	t.Parallel()
	order := loadTestSchema(t)
	refs, err := CompileSchema("refs", []byte(`{
	  "$id": "https://extractq.example/refs.v1.json", "x-version": "1",
	  "type": "object",
	  "$defs": {"party": {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": false}},
	  "properties": {
	    "buyer": {"$ref": "#/$defs/party"},
	    "contact": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"phone": {"type": "string"}}}]},
	    "attributes": {"type": "object", "additionalProperties": {"type": "string"}}
	  }
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s          *Schema
		path, want string
	}{
		{order, "", ""},
		{order, "/intent", "/intent"},
		{order, "/items/3/sku", "/items/3/sku"},
		// Keys the model invents: the customer's words never reach the
		// field path.
		{order, "/Chloe Zhang, card 4111 1111 1111 1111", "/(unknown)"},
		{order, "/items/3/Chloe Zhang", "/items/3/(unknown)"},
		{order, "/items/first/sku", "/items/(unknown)"},
		{order, "/intent/deeper", "/intent/(unknown)"},
		{order, "/a~1b/c", "/(unknown)"},
		{refs, "/buyer/name", "/buyer/name"},
		{refs, "/buyer/nickname", "/buyer/(unknown)"},
		{refs, "/contact/phone", "/contact/phone"},
		// A free-keyed object's keys are the customer's.
		{refs, "/attributes/allergic to nuts", "/attributes/(unknown)"},
	} {
		if got := tc.s.FieldPath(tc.path); got != tc.want {
			t.Errorf("%s: FieldPath(%q) = %q, want %q", tc.s.ID, tc.path, got, tc.want)
		}
	}
}

// TestFieldPathObjectForArray checks the keys of an object the model gave
// where the schema has an array: the NUL and surrogate checks walk the
// reply, not the schema, so their paths hold those keys, and a key of
// digits (a card, phone or order number) is no array index.
func TestFieldPathObjectForArray(t *testing.T) {
	t.Parallel()
	order := loadTestSchema(t)
	var raw map[string]any
	if err := json.Unmarshal([]byte(`{"items": {
	  "4111111111111111": {"sku": "a\u0000"},
	  "0094105": {"sku": "b\u0000"},
	  "2": {"sku": "c\u0000"}}}`), &raw); err != nil {
		t.Fatal(err)
	}
	errs := checkStrings(raw, "")
	if len(errs) != 3 {
		t.Fatalf("errs %v, want 3", errs)
	}
	for _, e := range errs {
		got := order.FieldPath(e.Path)
		if strings.Contains(got, "4111") || strings.Contains(got, "94105") {
			t.Errorf("FieldPath(%q) = %q holds the customer's key", e.Path, got)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"/items/4111111111111111/sku", "/items/(unknown)"},
		{"/items/0094105/sku", "/items/(unknown)"},
		{"/items/2/sku", "/items/2/sku"},
		{"/items/0/sku", "/items/0/sku"},
		{"/items/524288/sku", "/items/(unknown)"},
	} {
		if got := order.FieldPath(tc.path); got != tc.want {
			t.Errorf("FieldPath(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
	// Below maxItems a short number is an index; at or above it, a key
	// (a zip code) the schema's array cannot hold.
	capped, err := CompileSchema("capped", []byte(`{
	  "$id": "https://extractq.example/capped.v1.json", "x-version": "1",
	  "type": "object",
	  "properties": {"products": {"type": ["array", "null"], "maxItems": 20, "items": {"type": "string"}}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/products/19", "/products/19"},
		{"/products/20", "/products/(unknown)"},
		{"/products/94105", "/products/(unknown)"},
	} {
		if got := capped.FieldPath(tc.path); got != tc.want {
			t.Errorf("FieldPath(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
