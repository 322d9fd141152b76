package ingest_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// An id is stored and compared byte for byte: one with a control or an
// invisible format character or white space around it is rejected, saying
// which; a key that differs from "id", "text" or "source" only by case is
// named, and refused when the key itself is there too.
func TestParseLineIDs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70) + "\n"
	tests := []struct{ name, line, want string }{
		{"spaces around", `{"id":" bt-27 ","text":"x"}`, `"id" starts or ends with white space: " bt-27 "`},
		{"trailing tab", `{"id":"bt-29\t","text":"x"}`, `"id" contains a control character, U+0009 at byte 6: "bt-29\t"`},
		{"no-break space at the end", `{"id":"bt-30\u00a0","text":"x"}`, `"id" starts or ends with white space: "bt-30\u00a0"`},
		{"ideographic space at the start", `{"id":"\u3000bt-31","text":"x"}`, `"id" starts or ends with white space: "\u3000bt-31"`},
		{"newline at the end", `{"id":"bt-28\n","text":"x"}`, `"id" contains a control character, U+000A at byte 6: "bt-28\n"`},
		{"carriage return inside", `{"id":"a\rb","text":"x"}`, `"id" contains a control character, U+000D at byte 2: "a\rb"`},
		{"escape", `{"id":"a\u001b[31mb","text":"x"}`, `"id" contains a control character, U+001B at byte 2: "a\x1b[31mb"`},
		{"DEL", `{"id":"ab\u007f","text":"x"}`, `"id" contains a control character, U+007F at byte 3: "ab\x7f"`},
		{"C1 control after a two-byte letter", `{"id":"é\u0085","text":"x"}`, `"id" contains a control character, U+0085 at byte 3: "é\u0085"`},
		{"a long id is quoted in part", `{"id":"` + strings.TrimSuffix(long, "\n") + `\n","text":"x"}`,
			`"id" contains a control character, U+000A at byte 71: "` + strings.Repeat("x", 64) + `"...`},
		{"ID for id", `{"ID":"x","Text":"y"}`, `missing "id" (the line has "ID"; keys are case-sensitive)`},
		{"two of them", `{"Id":"x","ID":"y","text":"z"}`, `missing "id" (the line has "ID" and "Id"; keys are case-sensitive)`},
		{"Text for text", `{"id":"x","Text":"y"}`, `missing "text" (the line has "Text"; keys are case-sensitive)`},
		{"TEXT for text", `{"id":"x","TEXT":"y"}`, `missing "text" (the line has "TEXT"; keys are case-sensitive)`},
		{"nothing like it", `{"id":"x","body":"y"}`, `missing "text"`},
		{"Source for source", `{"id":"x","text":"y","Source":"crm"}`,
			`key "Source" differs from "source" only by case; keys are case-sensitive: name it "source", or give it another name to keep it as metadata`},
		{"ID beside id", `{"id":"x","ID":"y","text":"z"}`,
			`key "ID" differs from "id" only by case; keys are case-sensitive: name it "id", or give it another name to keep it as metadata`},
		{"zero-width space at the end", `{"id":"bt-32\u200b","text":"x"}`,
			`"id" contains an invisible format character, U+200B at byte 6: "bt-32\u200b"; an id is compared byte for byte, so it would be another message than the id without it`},
		{"byte order mark at the start", `{"id":"\ufeffbt-33","text":"x"}`,
			`"id" contains an invisible format character, U+FEFF at byte 1: "\ufeffbt-33"; an id is compared byte for byte, so it would be another message than the id without it`},
		{"left-to-right mark inside", `{"id":"bt\u200e-34","text":"x"}`,
			`"id" contains an invisible format character, U+200E at byte 3: "bt\u200e-34"; an id is compared byte for byte, so it would be another message than the id without it`},
	}
	for _, tt := range tests {
		_, err := ingest.ParseLine([]byte(tt.line), 64)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: ParseLine(%s) = %v, want %s", tt.name, tt.line, err, tt.want)
		}
	}
	// Still taken: white space and other characters inside an id.
	for _, id := range []string{"a b", "a\u00a0b", "order #48213", "café", "注文-48213"} {
		line := `{"id":"` + id + `","text":"x"}`
		if in, err := ingest.ParseLine([]byte(line), 64); err != nil || in.ID != id {
			t.Errorf("ParseLine(%s) = %q, %v; want id %q", line, in.ID, err, id)
		}
	}
}

// CSV ids pass the same checks, and a header column that is "id" or
// "text" but for case or white space is named.
func TestRunCSVIDs(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	csv := func(c *ingest.Config) { c.Format = ingest.FormatCSV }
	in := "id,text\n" +
		" bt-27 ,Where is order 48213?\n" +
		"\"bt-28\n\",Where is order 48214?\n" +
		"bt-29,Where is order 48215?\n"
	sum, err := e.Ingest(t, strings.NewReader(in), csv)
	want := ingest.Summary{BatchID: sum.BatchID, Lines: 3, Published: 1, Rejected: 2, Errors: []ingest.LineError{
		{Line: 2, Reason: `"id" starts or ends with white space: " bt-27 "`},
		{Line: 3, Reason: `"id" contains a control character, U+000A at byte 6: "bt-28\n"`},
	}}
	if err != nil || !reflect.DeepEqual(sum, want) {
		t.Errorf("CSV ids:\n got %+v, %v\nwant %+v", sum, err, want)
	}
	for _, tt := range []struct{ in, want string }{
		{"ID,Text\n1,x\n", `CSV header: no "id" column (the columns are "ID", "Text"); id and text are required (column "ID" differs only by case; names are case-sensitive)`},
		{"id, text\n1,x\n", `CSV header: no "text" column (the columns are "id", " text"); id and text are required (column " text" has white space around its name; names are matched exactly)`},
		{"id,body\n1,x\n", `CSV header: no "text" column (the columns are "id", "body"); id and text are required`},
		{"id,text,Source\n1,x,crm\n", `CSV header: column "Source" differs from "source" only by case; columns are case-sensitive: name it "source", or give it another name to keep it as metadata`},
	} {
		_, err := e.Ingest(t, strings.NewReader(tt.in), csv)
		if err == nil || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("header %q: Run = %v, want %s", tt.in, err, tt.want)
		}
	}
}
