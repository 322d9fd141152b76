package ingest_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/extractq/extractq/ingest"
)

// CheckMessage refuses what ParseLine refuses in a line's fields, with
// the same reasons, and keeps a metadata key named id as metadata.
func TestCheckMessage(t *testing.T) {
	t.Parallel()
	for _, m := range []ingest.Message{
		{ID: "", Text: "hi"},
		{ID: " a", Text: "hi"},
		{ID: "a\u200b", Text: "hi"},
		{ID: "a\n", Text: "hi"},
		{ID: "a", Text: "  "},
		{ID: "a", Text: "hi\x00"},
		{ID: "a", Text: "12345678901"},
		{ID: "a", Source: "s\x00", Text: "hi"},
		{ID: "a", Text: "hi", Metadata: map[string]any{"n": json.Number("1e1000000")}},
		{ID: "a", Text: "hi", Metadata: map[string]any{"k": "v\x00"}},
	} {
		line, _ := json.Marshal(map[string]any{"id": m.ID, "text": m.Text, "source": m.Source, "meta": m.Metadata["n"], "k": m.Metadata["k"]})
		_, lineErr := ingest.ParseLine(line, 10)
		_, err := ingest.CheckMessage(m, 10)
		if err == nil || lineErr == nil || (err.Error() != lineErr.Error() && m.Metadata == nil) {
			t.Errorf("%+v: %v; as a line: %v", m, err, lineErr)
		}
	}
	in, err := ingest.CheckMessage(ingest.Message{ID: "42", Source: "zendesk", Text: "caf\xe9 ok",
		Metadata: map[string]any{"id": "other", "text": 1}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s|%s|%s|%s|%v", in.ID, in.Source, in.Text, in.Metadata, in.Flags); got != `42|zendesk|caf`+"\uFFFD"+` ok|{"id":"other","text":1}|[invalid_utf8_replaced]` {
		t.Errorf("got %s", got)
	}
	if _, err := ingest.CheckMessage(ingest.Message{ID: "caf\xe9", Text: "hi"}, 100); err == nil {
		t.Error("an id of invalid UTF-8 was taken")
	}
}
