package llmsim

import (
	"reflect"
	"testing"
)

// TestFoldKeepsDocument checks that folding a $ref with allOf branches
// leaves the referenced schema as it is: nodes are shared, so folding must
// not change the document they come from.
func TestFoldKeepsDocument(t *testing.T) {
	t.Parallel()
	d, err := parseSchema([]byte(`{"$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"}}}},
	  "type": "object", "properties": {
	    "x": {"$ref": "#/$defs/base", "allOf": [{"properties": {"b": {"type": "string"}}}]},
	    "y": {"$ref": "#/$defs/base"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, props, _ := d.node(d.root).properties()
	x, _, _ := d.node(props["x"]).properties()
	y, _, _ := d.foldNode(props["y"]).properties()
	if !reflect.DeepEqual(x, []string{"a", "b"}) || !reflect.DeepEqual(y, []string{"a"}) {
		t.Errorf("properties of x %v, of y %v; want [a b] and [a]", x, y)
	}
}
