package pipeline

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestFirstClause(t *testing.T) {
	for in, want := range map[string]string{
		"City name as typed.": "City name as typed",
		"Order id: exactly 10 digits, kept as a string because it may start with 0.":                       "Order id: exactly 10 digits, kept as a string because it may start with 0",
		"The customer's goal: one ABCD subflow. Always present, never null.":                               "The customer's goal: one ABCD subflow",
		"The family of the intent (ABCD flow), fixed by the intent: account_access for recover_username.":  "The family of the intent (ABCD flow), fixed by the intent",
		"Membership level, normalised (customers misspell it: 'sliver' is silver).":                        "Membership level, normalised (customers misspell it: 'sliver' is silver)",
		"Products the customer names (brand then item, e.g. calvin klein jacket). A product bought twice.": "Products the customer names (brand then item, e.g. calvin klein jacket)",
		"Refund amount in US dollars and cents: a number as a string; more than 0.":                        "Refund amount in US dollars and cents",
	} {
		if got := firstClause(in); got != want {
			t.Errorf("firstClause(%q) = %q, want %q", in, got, want)
		}
	}
}

// dropDescriptions removes every "description" annotation (not a property
// of that name).
func dropDescriptions(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, c := range t {
			if k == "description" {
				if _, ok := c.(string); ok {
					continue
				}
			}
			if k == "properties" {
				props := map[string]any{}
				for name, s := range c.(map[string]any) {
					props[name] = dropDescriptions(s)
				}
				out[k] = props
				continue
			}
			out[k] = dropDescriptions(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = dropDescriptions(c)
		}
		return out
	}
	return v
}

// TestCompactRendering: the compact rendering of each bundled schema
// differs from the full one only in its descriptions (every constraint
// kept), is shorter, has no root description, and validates replies
// alike; the full rendering is the schema itself.
func TestCompactRendering(t *testing.T) {
	for _, file := range []string{"customer_message.v1.json", "return_request.v1.json"} {
		raw, err := os.ReadFile("../schemas/" + file)
		if err != nil {
			t.Fatal(err)
		}
		s, err := CompileSchema(strings.TrimSuffix(file, ".v1.json"), raw)
		if err != nil {
			t.Fatal(err)
		}
		if full, err := s.WithRendering(RenderingFull); err != nil || full != s {
			t.Fatalf("%s: full rendering %p, %v; want the schema itself", file, full, err)
		}
		if _, err := s.WithRendering("tiny"); err == nil || !strings.Contains(err.Error(), `"tiny"`) {
			t.Fatalf("%s: unknown rendering: %v", file, err)
		}
		c, err := s.WithRendering(RenderingCompact)
		if err != nil {
			t.Fatal(err)
		}
		if c.Rendering != CompactRenderingVersion || c.Version != s.Version || s.Rendering != "" {
			t.Errorf("%s: rendering %q version %q (full: %q)", file, c.Rendering, c.Version, s.Rendering)
		}
		if len(c.ModelSchema()) >= len(s.ModelSchema())*4/5 {
			t.Errorf("%s: compact %d bytes, full %d", file, len(c.ModelSchema()), len(s.ModelSchema()))
		}
		var fm, cm map[string]any
		if err := json.Unmarshal(s.ModelSchema(), &fm); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c.ModelSchema(), &cm); err != nil {
			t.Fatal(err)
		}
		if _, ok := cm["description"]; ok {
			t.Errorf("%s: the compact rendering keeps the root description", file)
		}
		if !reflect.DeepEqual(dropDescriptions(fm), dropDescriptions(cm)) {
			t.Errorf("%s: the renderings differ beyond their descriptions", file)
		}
		// The same schema validates: a reply with errors has the same ones.
		var bad any = map[string]any{"intent": "nope"}
		fe, _ := s.Validate(bad, "text")
		ce, _ := c.Validate(bad, "text")
		if len(fe) == 0 || !reflect.DeepEqual(fe, ce) {
			t.Errorf("%s: errors %v (full) and %v (compact)", file, fe, ce)
		}
	}
}

func TestPromptWithRendering(t *testing.T) {
	p, err := LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	if p.WithRendering("") != p {
		t.Error("the full rendering changed the prompt")
	}
	c := p.WithRendering(CompactRenderingVersion)
	if c.Version != "extract.v1+schema.compact.v1" || c.System("T") != p.System("T") || p.Version != "extract.v1" {
		t.Errorf("compact prompt version %q (full %q)", c.Version, p.Version)
	}
}
