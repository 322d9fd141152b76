package webhook_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingestapi/webhook"
)

func TestMap(t *testing.T) {
	t.Parallel()
	m := webhook.Mapping{ID: "/ticket/id", Text: "/ticket/description", DefaultSource: "zendesk",
		MetadataObject: "/ticket/fields", Metadata: map[string]string{"channel": "/ticket/via/channel", "first_tag": "/ticket/tags/0",
			"a/b": "/odd~1key", "gone": "/ticket/nothing"}}
	body := `{"ticket": {"id": 42, "description": "Where is order 48213?", "via": {"channel": "email"}, "tags": ["vip"],
		"fields": {"id": "not the message id", "priority": 2.50}}, "odd/key": true}`
	got, err := m.Map([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := ingest.Message{ID: "42", Source: "zendesk", Text: "Where is order 48213?", Metadata: map[string]any{
		"id": "not the message id", "priority": json.Number("2.50"), "channel": "email", "first_tag": "vip", "a/b": true}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Map (-want +got):\n%s", d)
	}
	m.Source = "/brand"
	if got, err := m.Map([]byte(`{"brand": "acme", "ticket": {"id": "z-1", "description": "hi"}}`)); err != nil || got.Source != "acme" || len(got.Metadata) != 0 {
		t.Errorf("with a source: %+v %v", got, err)
	}
}

// The errors name the field and its pointer, and where the body stops
// holding it.
func TestMapErrors(t *testing.T) {
	t.Parallel()
	m := webhook.Mapping{ID: "/ticket/id", Text: "/ticket/comments/0/body", Source: "/brand", MetadataObject: "/ticket/fields"}
	for _, c := range []struct {
		body  string
		field string
		want  string
	}{
		{`{"brand": "b"}`, "id", `not found: the body has no member "ticket"`},
		{`{"ticket": {"ID": 1}}`, "id", `"/ticket" has no member "id"`},
		{`{"ticket": null}`, "id", `"/ticket" is null, not an object or an array`},
		{`{"ticket": {"id": true}}`, "id", "the boolean true there; an id is a string or an integer"},
		{`{"ticket": {"id": 1.5}}`, "id", "the number 1.5 is not an integer"},
		{`{"ticket": {"id": {"n": 1}}}`, "id", "an object there"},
		{`{"ticket": {"id": 1}}`, "text", `"/ticket" has no member "comments"`},
		{`{"ticket": {"id": 1, "comments": []}}`, "text", `"/ticket/comments" is an array of 0, with no index 0`},
		{`{"ticket": {"id": 1, "comments": {"0": {"body": 5}}}}`, "text", "the number 5 there; the text is a string"},
		{`{"ticket": {"id": 1, "comments": [{"body": "hi"}]}}`, "source", `the body has no member "brand"`},
		{`{"brand": ["x"], "ticket": {"id": 1, "comments": [{"body": "hi"}]}}`, "source", "an array there"},
		{`{"brand": "b", "ticket": {"id": 1, "comments": [{"body": "hi"}], "fields": "x"}}`, "metadata", "a string there; metadata is an object"},
	} {
		_, err := m.Map([]byte(c.body))
		var me *webhook.MappingError
		if !errors.As(err, &me) || me.Field != c.field || !strings.Contains(me.Error(), c.want) {
			t.Errorf("%s: %v, want a MappingError of %s with %q", c.body, err, c.field, c.want)
			continue
		}
		if !strings.Contains(me.Error(), `(pointer "`+me.Pointer+`")`) {
			t.Errorf("%s: %v does not name its pointer", c.body, err)
		}
	}
	// An array index: digits without a leading zero.
	for _, p := range []string{"/a/01", "/a/-", "/a/+1", "/a/x"} {
		if _, err := webhook.Resolve(map[string]any{"a": []any{"x", "y"}}, p); err == nil || !strings.Contains(err.Error(), "is not an index") {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, c := range []struct{ body, want string }{
		{`{"ticket": `, "the body is not JSON"},
		{`{"a": 1} {"b": 2}`, "the body is not JSON"},
		{`{"a": 1, "a": 2}`, "the key /a twice"},
		{"{\"a\": \"caf\xe9\"}", "not valid UTF-8 (byte 11)"},
		{`{"a": "\ud800"}`, "lone UTF-16 surrogate"},
	} {
		_, err := m.Map([]byte(c.body))
		var be *webhook.BodyError
		if !errors.As(err, &be) || !strings.Contains(be.Error(), c.want) {
			t.Errorf("%q: %v, want a BodyError with %q", c.body, err, c.want)
		}
	}
}

func TestMappingCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    webhook.Mapping
		want string
	}{
		{webhook.Mapping{Text: "/t"}, "id: no pointer"},
		{webhook.Mapping{ID: "/i"}, "text: no pointer"},
		{webhook.Mapping{ID: "ticket/id", Text: "/t"}, `id: "ticket/id" is not a JSON Pointer: it must start with "/"`},
		{webhook.Mapping{ID: "/i", Text: "/t~2"}, `text: "/t~2" is not a JSON Pointer: "~" at byte 3`},
		{webhook.Mapping{ID: "/i", Text: "/t", Metadata: map[string]string{"ch": "x"}}, "metadata.ch:"},
		{webhook.Mapping{ID: "/i", Text: "/t", Metadata: map[string]string{"": "/x"}}, "metadata: a key is empty"},
	} {
		if err := c.m.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.m, err, c.want)
		}
	}
}
