package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// latin1ToUTF8 is what iconv -f latin1 -t utf-8 does: each byte is the
// code point of its value.
func latin1ToUTF8(b []byte) []byte {
	var out strings.Builder
	for _, c := range b {
		out.WriteRune(rune(c))
	}
	return []byte(out.String())
}

// A Latin-1 file is ingested (each bad byte run stored as U+FFFD), and the
// summary counts those messages and warns with their first lines and the
// conversion to run.
func TestIngestFileInvalidUTF8(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()

	// Lines 2-8 hold Latin-1 é (one in the metadata only), 9 is ASCII, 10
	// is rejected (no text).
	var b strings.Builder
	b.WriteString("id,text,note\n")
	for i := 2; i <= 7; i++ {
		fmt.Fprintf(&b, "l1-%d,caf\xe9 n\xb0 %d,\n", i, i)
	}
	b.WriteString("l1-8,plain text,r\xe9sum\xe9\n")
	b.WriteString("l1-9,plain text,\n")
	b.WriteString("l1-10,,\n")
	file := filepath.Join(dir, "export latin1.csv")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	o := fileOptions{File: file, ConfigPath: configPath, Quiet: true}
	code, stdout, stderr := runCommand(t, o, env)
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, ": 9 lines, 8 published, 0 duplicates, 1 rejected\n") ||
		!strings.Contains(stdout, "\ninvalid UTF-8: 7 messages stored with U+FFFD in place of bytes that are not UTF-8 (flag invalid_utf8_replaced)\n") {
		t.Errorf("stdout does not count the messages with invalid UTF-8:\n%s", stdout)
	}
	wantWarning := "ingest: warning: 7 messages held bytes that are not UTF-8, stored as U+FFFD (lines 2, 3, 4, 5, 6 and 2 more): " +
		file + " is not UTF-8 (Latin-1 or Windows-1252, say); convert it before ingesting, e.g. " +
		"iconv -f latin1 -t utf-8 '" + file + "' > '" + filepath.Join(dir, "export latin1.utf8.csv") + "' " +
		"(the stored messages keep the U+FFFD; ingesting a converted copy rejects the changed texts as conflicts)\n"
	if !strings.Contains(stderr, wantWarning) || strings.Count(stderr, "warning") != 1 {
		t.Errorf("stderr:\n%s\nwant the warning line\n%s", stderr, wantWarning)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM messages WHERE 'invalid_utf8_replaced' = ANY(flags)`); n != 7 {
		t.Errorf("%d messages flagged, want 7", n)
	}

	// The converted copy is clean, and as the warning says, its changed
	// texts are conflicts now (line 8's metadata changed, not its text: a
	// duplicate).
	conv := filepath.Join(dir, "converted.csv")
	if err := os.WriteFile(conv, latin1ToUTF8([]byte(b.String())), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCommand(t, fileOptions{File: conv, ConfigPath: configPath, JSON: true, Quiet: true}, env)
	var rep ingest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if code != exitOK || rep.InvalidUTF8 != 0 || rep.Duplicates != 2 || rep.Rejected != 7 || strings.Contains(stderr, "warning") {
		t.Errorf("converted copy: exit %d, report %+v, stderr:\n%s\nwant 6 conflicts, 2 duplicates, no warning", code, rep, stderr)
	}
	if strings.Contains(stdout, "invalid_utf8") {
		t.Errorf("clean input: -json has invalid_utf8 keys: %s", stdout)
	}

	// JSONL with -json: counted, with the lines, in the report.
	fixture := filepath.Join("..", "..", "testdata", "bad-input", "invalid_utf8.jsonl")
	code, stdout, stderr = runCommand(t, fileOptions{File: fixture, ConfigPath: configPath, JSON: true, Quiet: true}, env)
	rep = ingest.Report{}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if code != exitOK || rep.Published != 4 || rep.InvalidUTF8 != 3 || !slices.Equal(rep.InvalidUTF8Lines, []int{1, 2, 3}) {
		t.Errorf("invalid_utf8.jsonl: exit %d, report %+v; want 4 published, 3 with invalid UTF-8 on lines 1-3", code, rep)
	}
	if !strings.Contains(stderr, "ingest: warning: 3 messages held bytes that are not UTF-8, stored as U+FFFD (lines 1, 2, 3): ") ||
		!strings.Contains(stderr, "iconv -f latin1 -t utf-8 ../../testdata/bad-input/invalid_utf8.jsonl > ../../testdata/bad-input/invalid_utf8.utf8.jsonl") {
		t.Errorf("invalid_utf8.jsonl: stderr:\n%s", stderr)
	}
}
