package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// A key Postgres could hold only rewritten (invalid UTF-8, NUL) is
// refused, naming its part, and a value Postgres refuses is a
// *ValueError (not Transient): the caller rejects that one input. Before,
// "caf\xe9" was stored as "caf\uFFFD", and "caf\xe8" then conflicted
// with it.
func TestMessageIngestValueErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)
	for _, tt := range []struct {
		name   string
		edit   func(*store.MessageIngestParams)
		field  string
		code   string
		reason string
	}{
		{"id not UTF-8", func(p *store.MessageIngestParams) { p.ExternalID = "caf\xe9" }, "id", "", "is not valid UTF-8: byte 4 is 0xE9"},
		{"id with a NUL", func(p *store.MessageIngestParams) { p.ExternalID = "a\x00b" }, "id", "", "contains a NUL character at byte 2"},
		{"source not UTF-8", func(p *store.MessageIngestParams) { p.Source = "cr\xffm" }, "source", "", "is not valid UTF-8: byte 3 is 0xFF"},
		{"metadata number", func(p *store.MessageIngestParams) { p.Metadata = []byte(`{"n":1e1000000}`) }, "", "22003", "value overflows numeric format"},
	} {
		p := ingestParams(batch, uniqueID("V"), "some text")
		tt.edit(&p)
		_, err := st.MessageIngest(ctx, tx, p)
		ve, ok := errors.AsType[*store.ValueError](err)
		if !ok || ve.Field != tt.field || ve.Code != tt.code || !strings.Contains(ve.Reason, tt.reason) || store.Transient(err) {
			t.Errorf("%s: MessageIngest = %v, want a *ValueError of field %q, code %q: %s", tt.name, err, tt.field, tt.code, tt.reason)
		}
		if tt.code != "" {
			break // the transaction is aborted
		}
	}
}
