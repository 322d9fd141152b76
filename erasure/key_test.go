package erasure_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

func TestReadKeys(t *testing.T) {
	t.Parallel()
	// A byte order mark is dropped; "#..." is an id like any other (ingest
	// takes it); an integer id is its decimal text.
	in := "\ufeffm-1\n\n  m-2  \n#hash-1\n{\"source\": \"chat\", \"id\": \"c-9\"}\n{\"id\": \"m-3\"}\n{\"id\": 12}\n"
	got, err := erasure.ReadKeys(strings.NewReader(in), "mail")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.MessageKey{{Source: "mail", ExternalID: "m-1"}, {Source: "mail", ExternalID: "m-2"}, {Source: "mail", ExternalID: "#hash-1"},
		{Source: "chat", ExternalID: "c-9"}, {Source: "mail", ExternalID: "m-3"}, {Source: "mail", ExternalID: "12"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ReadKeys = %v, want %v", got, want)
	}
	for _, tt := range []struct{ in, want string }{
		{"m-1\n{\"id\": 1.5}\n", `line 2: "id" must be a string or an integer, not 1.5`},
		{`{"id": "m-5", "id": "m-6"}`, "line 1: key /id occurs twice"},
		{`{"id": "m-5"}{"id": "m-6"}`, "line 1: data after the JSON value"},
		{`{"ID": "m-5"}`, `line 1: unknown key "ID" (keys are case-sensitive)`},
		{"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", "line 1 is not UTF-8 text"},
		{"\xff\xfem\x00-\x001\x00\n\x00", "line 1 is not UTF-8 text"},
		{`{"source": "mail"}`, `line 1: the object has no "id"`},
		// Decoded, a lone surrogate escape is U+FFFD: the key would name
		// the message stored as "caf\uFFFD", another customer's.
		{"m-1\n" + `{"source": "mail", "id": "caf\ud800"}`, "line 2: a lone UTF-16 surrogate escape"},
		{`{"source": "m\udfff", "id": "m-1"}`, "line 1: a lone UTF-16 surrogate escape"},
	} {
		if _, err := erasure.ReadKeys(strings.NewReader(tt.in), ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadKeys(%q) = %v, want an error with %q", tt.in, err, tt.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		json string
		want store.MessageKey
		err  string
	}{
		{`{"source": "web", "id": "e-1"}`, store.MessageKey{Source: "web", ExternalID: "e-1"}, ""},
		{`{"id": "e-1"}`, store.MessageKey{Source: "mail", ExternalID: "e-1"}, ""}, // the default source
		{`{"source": "", "id": "e-1"}`, store.MessageKey{ExternalID: "e-1"}, ""},   // no source, given
		{`{"id": 12}`, store.MessageKey{Source: "mail", ExternalID: "12"}, ""},
		{`{"id": -7}`, store.MessageKey{Source: "mail", ExternalID: "-7"}, ""},
		// An id with a format character, which ingest no longer takes, may
		// have been stored before: it can still be erased.
		{`{"id": "e-1\u200b"}`, store.MessageKey{Source: "mail", ExternalID: "e-1\u200b"}, ""},
		{`{"id": 1.5}`, store.MessageKey{}, `"id" must be a string or an integer, not 1.5`},
		{`{"id": 1e3}`, store.MessageKey{}, `"id" must be a string or an integer, not 1e3`},
		{`{"id": null}`, store.MessageKey{}, `"id" must be a string or an integer`},
		{`{"id": true}`, store.MessageKey{}, `"id" must be a string or an integer`},
		{`{"source": "web"}`, store.MessageKey{}, `the object has no "id"`},
		{`{"ID": "e-1"}`, store.MessageKey{}, `unknown key "ID" (keys are case-sensitive)`},
		{`{"id": "e\u0000"}`, store.MessageKey{}, `"id" contains a NUL character`},
		{`{"id": " e-1"}`, store.MessageKey{}, `"id" starts or ends with white space`},
		{`{"id": ""}`, store.MessageKey{}, `"id" is empty`},
		{`{"source": 3, "id": "e-1"}`, store.MessageKey{}, `"source" must be a string without NUL`},
		{`["e-1"]`, store.MessageKey{}, `not a JSON object`},
	} {
		v, err := pipeline.DecodeStrict([]byte(tt.json))
		if err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		got, err := erasure.ParseKey(v, "mail")
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseKey(%s) = %+v, %v; want %+v", tt.json, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseKey(%s) = %v; want an error with %q", tt.json, err, tt.err)
		}
	}
}
