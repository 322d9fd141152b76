package ingest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

func TestRunEmptyInput(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	for _, tt := range ingesttest.EmptyInputs {
		for _, parallel := range []int{1, 4} {
			sum, err := e.Ingest(t, strings.NewReader(tt.In), func(c *ingest.Config) { c.Format = tt.Format; c.Parallel = parallel })
			ee, ok := errors.AsType[*ingest.EmptyInputError](err)
			if !ok || ee.Reason != tt.Reason {
				t.Errorf("%s (parallel %d): Run = %v, want an EmptyInputError: %s", tt.Name, parallel, err, tt.Reason)
				continue
			}
			if _, ok := errors.AsType[*ingest.StartError](err); !ok {
				t.Errorf("%s: error %T is not a *StartError", tt.Name, err)
			}
			if want := "ingest: the input holds no messages (" + tt.Reason + ")"; err.Error() != want {
				t.Errorf("%s: error %q, want %q", tt.Name, err, want)
			}
			if sum.Lines != 0 || sum.Rejected != 0 || sum.Published != 0 {
				t.Errorf("%s: summary %+v, want nothing read", tt.Name, sum)
			}
		}
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}

	// Rejected lines, even over-long ones, record no batch: only a line
	// that passes its checks does.
	for _, in := range []string{"\n\nnot json\n", "\n" + strings.Repeat("x", ingest.MaxLineBytes+1)} {
		for _, parallel := range []int{1, 4} {
			sum, err := e.Ingest(t, strings.NewReader(in), func(c *ingest.Config) { c.Parallel = parallel })
			if err != nil || sum.Lines != 1 || sum.Rejected != 1 || sum.BatchID != "" {
				t.Errorf("%.20q (parallel %d): %+v, %v; want 1 line rejected and no batch", in, parallel, sum, err)
			}
		}
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	sum, err := e.Ingest(t, strings.NewReader("not json\n{\"id\": \"a\", \"text\": \"hello\"}\n"), nil)
	if err != nil || sum.Published != 1 || sum.BatchID == "" {
		t.Errorf("a rejected line, then a good one: %+v, %v; want 1 published in a batch", sum, err)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 1 {
		t.Errorf("%d batches recorded, want 1", n)
	}
}
