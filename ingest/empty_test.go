package ingest_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
)

// emptyInputs hold no message: Run records no batch and says why. The
// same in either format.
var emptyInputs = []struct {
	name   string
	format ingest.Format
	file   string // the file's name in TestRunCommandEmptyInput
	in     string
	reason string
}{
	{"empty JSONL", ingest.FormatJSONL, "empty.jsonl", "", "it is empty"},
	{"JSONL of a byte order mark only", ingest.FormatJSONL, "bom.jsonl", "\ufeff", "it is empty"},
	{"JSONL of blank lines only", ingest.FormatJSONL, "blank.jsonl", "\n  \n\t\r\n", "it has only blank lines"},
	{"empty CSV", ingest.FormatCSV, "empty.csv", "", "it is empty"},
	{"CSV of blank lines only", ingest.FormatCSV, "blank.csv", "\ufeff\r\n\n", "it has only blank lines"},
	{"CSV of a header only", ingest.FormatCSV, "header.csv", "id,text,channel\r\n", "it has only the CSV header row"},
	{"CSV of a header and blank lines", ingest.FormatCSV, "header-blank.csv", "\ufeffid,text\n\n\r\n", "it has only the CSV header row"},
	{"CSV of lines of spaces only", ingest.FormatCSV, "spaces.csv", "  \r\n\t\n \r", "it has only blank lines"},
	{"CSV of a header and lines of spaces", ingest.FormatCSV, "header-spaces.csv", "id,text\n   \n\t \r\n  ", "it has only the CSV header row"},
}

func TestRunEmptyInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tt := range emptyInputs {
		for _, parallel := range []int{1, 4} {
			sum, err := e.ingest(t, strings.NewReader(tt.in), func(c *ingest.Config) { c.Format = tt.format; c.Parallel = parallel })
			ee, ok := errors.AsType[*ingest.EmptyInputError](err)
			if !ok || ee.Reason != tt.reason {
				t.Errorf("%s (parallel %d): Run = %v, want an EmptyInputError: %s", tt.name, parallel, err, tt.reason)
				continue
			}
			if _, ok := errors.AsType[*ingest.StartError](err); !ok {
				t.Errorf("%s: error %T is not a *StartError", tt.name, err)
			}
			if want := "ingest: the input holds no messages (" + tt.reason + ")"; err.Error() != want {
				t.Errorf("%s: error %q, want %q", tt.name, err, want)
			}
			if sum.Lines != 0 || sum.Rejected != 0 || sum.Published != 0 {
				t.Errorf("%s: summary %+v, want nothing read", tt.name, sum)
			}
		}
	}
	if n := e.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}

	// Rejected lines, even over-long ones, record no batch: only a line
	// that passes its checks does.
	for _, in := range []string{"\n\nnot json\n", "\n" + strings.Repeat("x", ingest.MaxLineBytes+1)} {
		for _, parallel := range []int{1, 4} {
			sum, err := e.ingest(t, strings.NewReader(in), func(c *ingest.Config) { c.Parallel = parallel })
			if err != nil || sum.Lines != 1 || sum.Rejected != 1 || sum.BatchID != "" {
				t.Errorf("%.20q (parallel %d): %+v, %v; want 1 line rejected and no batch", in, parallel, sum, err)
			}
		}
	}
	if n := e.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	sum, err := e.ingest(t, strings.NewReader("not json\n{\"id\": \"a\", \"text\": \"hello\"}\n"), nil)
	if err != nil || sum.Published != 1 || sum.BatchID == "" {
		t.Errorf("a rejected line, then a good one: %+v, %v; want 1 published in a batch", sum, err)
	}
	if n := e.countSQL(t, `SELECT count(*) FROM batches`); n != 1 {
		t.Errorf("%d batches recorded, want 1", n)
	}
}

func TestRunCommandEmptyInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()
	for _, tt := range emptyInputs {
		file := filepath.Join(dir, tt.file)
		if err := os.WriteFile(file, []byte(tt.in), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, json := range []bool{false, true} {
			o := ingest.CommandOptions{File: file, ConfigPath: configPath, JSON: json, Quiet: true, Wait: true}
			code, stdout, stderr := runCommand(t, o, env)
			want := "ingest: " + file + " holds no messages (" + tt.reason + "); no batch was recorded\n"
			if code != ingest.ExitNothingIngested || stderr != want || stdout != "" {
				t.Errorf("%s (-json %v): exit %d, stdout %q, stderr %q; want exit %d, no report, stderr %q",
					tt.name, json, code, stdout, stderr, ingest.ExitNothingIngested, want)
			}
		}
	}
	// A bad header is still a bad header, records or not.
	file := filepath.Join(dir, "noid.csv")
	if err := os.WriteFile(file, []byte("ticket,text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCommand(t, ingest.CommandOptions{File: file, ConfigPath: configPath, Quiet: true}, env)
	if code != ingest.ExitError || !strings.Contains(stderr, `ingest: stopped: CSV header: no "id" column`) {
		t.Errorf("header without id, no records: exit %d, stderr %q; want exit 1 and the header error", code, stderr)
	}
	if n := e.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
}
