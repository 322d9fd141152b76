package main

import (
	"testing"
	"time"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/internal/startup"
)

// The file command refuses a compressed file or one that is not text
// with one message, and says how to ingest it; no batch is recorded.
func TestIngestFileUnreadableInput(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()
	write := func(name, body string) string { return ingesttest.WriteFile(t, dir, name, body) }
	lines := ingesttest.GoodLines(1015)
	gz := write("k4.jsonl.gz", ingesttest.Gzipped(t, lines))
	csvGz := write("k4.csv.gz", ingesttest.Gzipped(t, "id,text\n1,x\n"))
	bin := write("junk.bin", ingesttest.RandomBytes(3<<20))
	utf16 := write("u16.jsonl", ingesttest.UTF16LE("\ufeff"+ingesttest.GoodLines(3)))
	zipFile := write("export.zip", ingesttest.Zipped(t, "k4.jsonl", lines))
	tests := []struct {
		name   string
		o      fileOptions
		stderr string
	}{
		{"gzip JSONL", fileOptions{File: gz, JSON: true},
			"ingest: " + gz + " is gzip-compressed (it starts with the bytes 1f 8b), not JSONL text; nothing was read and no batch was recorded; " +
				"decompress it into ingest, adding your other flags: gunzip -c " + gz + " | ingest -\n"},
		{"gzip read as CSV", fileOptions{File: gz, Format: "csv"},
			"ingest: " + gz + " is gzip-compressed (it starts with the bytes 1f 8b), not CSV text; nothing was read and no batch was recorded; " +
				"decompress it into ingest, adding your other flags: gunzip -c " + gz + " | ingest -format csv -\n"},
		{"gzip CSV by its name", fileOptions{File: csvGz},
			"ingest: " + csvGz + " is gzip-compressed (it starts with the bytes 1f 8b), not JSONL text; nothing was read and no batch was recorded; " +
				"decompress it into ingest, adding your other flags: gunzip -c " + csvGz + " | ingest -format csv -\n"},
		{"zip", fileOptions{File: zipFile, JSON: true},
			"ingest: " + zipFile + " is a zip archive (it starts with the bytes 50 4b 03 04; an Excel .xlsx workbook is one too), not JSONL text; " +
				"nothing was read and no batch was recorded; extract the file from it into ingest, adding your other flags: unzip -p " + zipFile + " | ingest -\n"},
		{"random bytes", fileOptions{File: bin, JSON: true},
			"ingest: " + bin + " does not look like JSONL or CSV text (2201 of its first 4096 bytes are control characters or not UTF-8); " +
				"nothing was read and no batch was recorded: is it the file you meant?\n"},
		{"UTF-16", fileOptions{File: utf16},
			"ingest: " + utf16 + " looks like UTF-16 (it starts with a UTF-16 byte order mark); only UTF-8 is read; nothing was read and no batch was recorded; " +
				"convert it into ingest, adding your other flags: iconv -f UTF-16 -t UTF-8 " + utf16 + " | ingest -\n"},
	}
	for _, tt := range tests {
		tt.o.ConfigPath, tt.o.Quiet = configPath, true
		code, stdout, stderr := runCommand(t, tt.o, env)
		if code != exitError || stdout != "" || stderr != tt.stderr {
			t.Errorf("%s: exit %d, stdout %.200q, stderr (%d bytes)\n%.600s\nwant exit %d, no report, stderr\n%s",
				tt.name, code, stdout, len(stderr), stderr, exitError, tt.stderr)
		}
	}
	// It is refused before connecting: with Postgres and NATS out of
	// reach too.
	nowhere := startup.Env{DatabaseURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable", NATSURL: "nats://127.0.0.1:1"}
	start := time.Now()
	code, _, stderr := runCommand(t, fileOptions{File: gz, ConfigPath: configPath, Quiet: true}, nowhere)
	if code != exitError || stderr != tests[0].stderr || time.Since(start) > 5*time.Second {
		t.Errorf("services out of reach: exit %d after %v, stderr %.300q; want at once exit 1 and\n%s", code, time.Since(start), stderr, tests[0].stderr)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}
