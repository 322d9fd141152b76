package pipeline

import "testing"

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
