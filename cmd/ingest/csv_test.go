package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

func TestIngestFileCSV(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()
	write := func(name, body string) string { return ingesttest.WriteFile(t, dir, name, body) }
	file := write("export.CSV", "id,text,tag\ncsv-1,Where is order 48213?,late\ncsv-2,\ncsv-3,\"Two\nlines\",\n")

	// The extension picks CSV.
	o := fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true}
	code, stdout, stderr := runCommand(t, o, env)
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	var rep ingest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if rep.Lines != 3 || rep.Published != 2 || rep.Rejected != 1 || rep.Queued != 2 {
		t.Errorf("report = %+v, want 3 lines, 2 published, 1 rejected", rep)
	}
	if !strings.Contains(stderr, `ingest: rejected line 3 (id "csv-2"): has 2 fields, the header has 3`) {
		t.Errorf("stderr does not report the short record:\n%s", stderr)
	}

	// -format jsonl reads it as JSONL: every line rejected.
	o.Format = "jsonl"
	if code, _, stderr := runCommand(t, o, env); code != exitNothingIngested {
		t.Errorf("-format jsonl: exit %d, want %d; stderr:\n%s", code, exitNothingIngested, stderr)
	}
	// -format csv (any case) reads any name as CSV: duplicates.
	o = fileOptions{File: write("export.txt", "id,text\ncsv-1,Where is order 48213?\n"), Format: "CSV", ConfigPath: configPath, Quiet: true}
	code, stdout, stderr = runCommand(t, o, env)
	if code != exitOK || !strings.Contains(stdout, ": 1 lines, 0 published, 1 duplicates, 0 rejected") {
		t.Errorf("-format csv: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	batches := e.CountSQL(t, `SELECT count(*) FROM batches`)
	// An unknown format is bad usage; a bad header stops before anything
	// is recorded, and nothing is printed on stdout.
	tests := []struct {
		name       string
		o          fileOptions
		code       int
		wantStderr string
	}{
		{"unknown format", fileOptions{File: file, Format: "xml", ConfigPath: configPath, JSON: true, Quiet: true},
			exitUsage, `ingest: -format: unknown format "xml" (want jsonl or csv)`},
		{"bad header", fileOptions{File: write("noid.csv", "ticket,text\n1,x\n"), ConfigPath: configPath, JSON: true, Quiet: true},
			exitError, `ingest: stopped: CSV header: no "id" column (the columns are "ticket", "text")`},
		{"batch id already used", fileOptions{File: file, BatchID: rep.BatchID, ConfigPath: configPath, JSON: true, Quiet: true},
			exitError, "ingest: batch \"" + rep.BatchID + "\" already exists; a batch id is used once"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCommand(t, tt.o, env)
		if code != tt.code || !strings.Contains(stderr, tt.wantStderr) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant exit %d and %q", tt.name, code, stdout, stderr, tt.code, tt.wantStderr)
		}
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != batches {
		t.Errorf("%d batches after the failed runs, want %d", n, batches)
	}
}

// CSV read as JSONL: every line rejected, and the message says it looks
// like CSV.
func TestIngestFileCSVAsJSONL(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()
	tests := []struct {
		name, body string
		hint       bool
	}{
		{"a CSV header", "\ufeffid,source,\"text\"\r\n1,web,where is my order\r\n", true},
		{"not CSV either", "hello\nworld\n", false},
		{"no text column", "id,body\n1,where is my order\n", false},
	}
	for i, tt := range tests {
		file := filepath.Join(dir, fmt.Sprintf("in%d.txt", i))
		if err := os.WriteFile(file, []byte(tt.body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCommand(t, fileOptions{File: file, ConfigPath: configPath, Quiet: true}, env)
		if code != exitNothingIngested || !strings.Contains(stderr, "every one of the 2 lines was rejected") {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", tt.name, code, exitNothingIngested, stderr)
		}
		if got := strings.Contains(stderr, "lines was rejected; nothing was queued; the input looks like CSV: use -format csv"); got != tt.hint {
			t.Errorf("%s: hint %v, want %v; stderr:\n%s", tt.name, got, tt.hint, stderr)
		}
		// -json carries the hint too.
		code, stdout, _ := runCommand(t, fileOptions{File: file, ConfigPath: configPath, Quiet: true, JSON: true}, env)
		var rep ingest.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitNothingIngested {
			t.Fatalf("%s -json: exit %d, %v:\n%s", tt.name, code, err, stdout)
		}
		if got := rep.Hint == "the input looks like CSV: use -format csv"; got != tt.hint {
			t.Errorf("%s -json: hint %q, want it %v", tt.name, rep.Hint, tt.hint)
		}
	}
}
