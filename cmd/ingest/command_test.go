package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store/storetest"
)

// commandSetup returns an env reaching the test's private schema, a
// configuration file naming its private stream, and a JSONL file of
// good messages and, when good > 0, one bad line (line 2).
func commandSetup(t *testing.T, e *ingesttest.Env, good int) (env startup.Env, configPath, file string) {
	t.Helper()
	dir := t.TempDir()
	configPath = filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("nats:\n  stream: %s\n  subject_prefix: %s\ningest:\n  max_text_bytes: %d\n",
		e.NATS.Stream, e.NATS.SubjectPrefix, ingesttest.MaxText)
	if err := os.WriteFile(configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range good {
		fmt.Fprintf(&b, `{"id": "cmd-%d", "text": "Where is order %d?"}`+"\n", i, 48000+i)
		if i == 0 {
			b.WriteString(`{"id": "cmd-bad"}` + "\n")
		}
	}
	file = filepath.Join(dir, "messages.jsonl")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	env = startup.Env{DatabaseURL: storetest.SchemaURL(t, e.Store), NATSURL: queuetest.URL()}
	return env, configPath, file
}

// runCommand runs ingestFile and returns its exit status, stdout and stderr.
func runCommand(t *testing.T, o fileOptions, env startup.Env) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	// A no-op logger: the NATS connection may log after the test ends.
	code := ingestFile(t.Context(), o, env, zap.NewNop(), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestIngestFileJSON(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, file := commandSetup(t, e, 3)

	o := fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true}
	code, stdout, stderr := runCommand(t, o, env)
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if strings.Count(stdout, "\n") != 1 {
		t.Errorf("stdout has %d lines, want 1", strings.Count(stdout, "\n"))
	}
	want := map[string]float64{
		"published": 3, "duplicates": 0, "rejected": 1, "succeeded": 0, "repaired": 0, "failed": 0,
		"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0, "lines": 4, "queued": 3,
	}
	for key, w := range want {
		v, ok := got[key]
		if !ok {
			t.Errorf("report has no %q: %s", key, stdout)
			continue
		}
		if n, ok := v.(float64); !ok || n != w {
			t.Errorf("report %q = %v, want %v", key, v, w)
		}
	}
	batchID, _ := got["batch_id"].(string)
	if !regexp.MustCompile(`^b-\d{8}-\d{6}-[0-9a-f]{6}$`).MatchString(batchID) {
		t.Errorf("report batch_id = %v, want a generated batch id", got["batch_id"])
	}
	if _, ok := got["timed_out"]; ok {
		t.Errorf("report has timed_out without -wait: %s", stdout)
	}
	errs, _ := got["errors"].([]any)
	if len(errs) != 1 || fmt.Sprint(errs[0]) != `map[id:cmd-bad line:2 reason:missing "text"]` {
		t.Errorf("report errors = %v, want line 2 missing text", got["errors"])
	}
	if !strings.Contains(stderr, `ingest: rejected line 2 (id "cmd-bad"): missing "text"`) {
		t.Errorf("stderr does not report the rejected line:\n%s", stderr)
	}
	if n := e.CountSQL(t, fmt.Sprintf(`SELECT count(*) FROM runs WHERE batch_id = '%s' AND published_at IS NOT NULL`, batchID)); n != 3 {
		t.Errorf("%d published runs in batch %s, want 3", n, batchID)
	}
	var source string
	if err := e.Store.Pool.QueryRow(t.Context(), `SELECT source_name FROM batches WHERE id = $1`, batchID).Scan(&source); err != nil || source != file {
		t.Errorf("batch source_name = %q, %v; want %q", source, err, file)
	}
	if n := e.StreamMsgs(t); n != 3 {
		t.Errorf("stream holds %d messages, want 3", n)
	}

	// Again, with a named batch and text output: all duplicates, so
	// nothing new got in and no batch is left behind.
	o = fileOptions{File: file, ConfigPath: configPath, BatchID: "b-again", Quiet: true}
	code, stdout, stderr = runCommand(t, o, env)
	if code != exitOK {
		t.Fatalf("second run: exit %d, want 0; stderr:\n%s", code, stderr)
	}
	if wantLine := "no batch recorded: 4 lines, 0 published, 3 duplicates, 1 rejected\n"; !strings.HasPrefix(stdout, wantLine) ||
		!strings.Contains(stdout, ", 3 queued\n") {
		t.Errorf("second run stdout:\n%s\nwant it to start with %q and count the 3 duplicates queued", stdout, wantLine)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches WHERE id = 'b-again'`); n != 0 {
		t.Errorf("an all-duplicate ingest left its batch row")
	}
	if n := e.StreamMsgs(t); n != 3 {
		t.Errorf("stream holds %d messages after the second run, want 3", n)
	}

	// A batch id used already: refused before anything is recorded, and
	// before a line is read (the file's rejected line is not listed).
	o.BatchID = batchID
	code, stdout, stderr = runCommand(t, o, env)
	wantErr := "ingest: batch \"" + batchID + "\" already exists; a batch id is used once: leave out -batch for a new one (nothing was recorded)\n"
	if code != exitError || stdout != "" || stderr != wantErr {
		t.Errorf("third run, same -batch: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and %q", code, stdout, stderr, wantErr)
	}
}

func TestIngestFileWaitTimesOut(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, file := commandSetup(t, e, 2)

	// No worker runs, so the batch stays queued.
	o := fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true,
		Wait: true, Timeout: 200 * time.Millisecond, PollEvery: 20 * time.Millisecond}
	code, stdout, stderr := runCommand(t, o, env)
	if code != exitTimeout {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitTimeout, stderr)
	}
	var rep ingest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if !rep.TimedOut || rep.Queued != 2 || rep.Published != 2 {
		t.Errorf("report = %+v, want timed out with 2 queued", rep)
	}
	if !strings.Contains(stderr, "timed out after 200ms with 2 of the batch's messages still queued; their runs wait on consumer ") {
		t.Errorf("stderr:\n%s", stderr)
	}

	// Ingested again while still queued: duplicates, but still waited for.
	code, stdout, stderr = runCommand(t, o, env)
	if code != exitTimeout {
		t.Fatalf("second run: exit %d, want %d; stderr:\n%s", code, exitTimeout, stderr)
	}
	rep = ingest.Report{}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if rep.Published != 0 || rep.Duplicates != 2 || rep.Queued != 2 || rep.QueuedDuplicates != 2 {
		t.Errorf("second report = %+v, want 2 duplicates still queued", rep)
	}
}

func TestIngestFileWaitEmptyBatch(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	file := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(file, []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Nothing queued: the batch is done at once (no timeout), and the exit
	// status says every line was rejected.
	o := fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true, Wait: true, Timeout: time.Minute}
	code, stdout, stderr := runCommand(t, o, env)
	if code != exitNothingIngested {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitNothingIngested, stderr)
	}
	var rep ingest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if rep.TimedOut || rep.Rejected != 1 || rep.Published != 0 || rep.Queued != 0 {
		t.Errorf("report = %+v, want 1 rejected, not timed out", rep)
	}
}

func TestIngestFileAllRejected(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 1)
	file := filepath.Join(t.TempDir(), "wrong.jsonl")
	if err := os.WriteFile(file, []byte("id,text\n1,where is my order\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCommand(t, fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true}, env)
	if code != exitNothingIngested {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitNothingIngested, stderr)
	}
	if !strings.Contains(stderr, "every one of the 2 lines was rejected") || !strings.Contains(stderr, "line 1") {
		t.Errorf("stderr does not name the lines and the outcome:\n%s", stderr)
	}
	var rep ingest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Rejected != 2 || rep.Published != 0 || len(rep.Errors) != 2 || rep.BatchID != "" {
		t.Errorf("report = %+v (%v), want 2 rejected with their errors, and no batch", rep, err)
	}
	// The text report says no batch was recorded.
	_, stdout, _ = runCommand(t, fileOptions{File: file, ConfigPath: configPath, Quiet: true}, env)
	if !strings.HasPrefix(stdout, "no batch recorded: 2 lines, 0 published, 0 duplicates, 2 rejected\n") {
		t.Errorf("text report:\n%s", stdout)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded for inputs whose every line was rejected, want 0", n)
	}
	// One good line among bad ones is a normal ingest.
	mixed := filepath.Join(t.TempDir(), "mixed.jsonl")
	if err := os.WriteFile(mixed, []byte("not json\n{\"id\": \"ok-1\", \"text\": \"Where is order 48213?\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCommand(t, fileOptions{File: mixed, ConfigPath: configPath, JSON: true, Quiet: true}, env); code != exitOK {
		t.Errorf("one good line: exit %d, want 0; stderr:\n%s", code, stderr)
	}
}

func TestIngestFileErrors(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, file := commandSetup(t, e, 1)
	badConfig := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("nats:\n  no_such_field: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		o          fileOptions
		code       int
		wantStderr string
	}{
		{"unknown schema", fileOptions{File: file, ConfigPath: configPath, SchemaID: "no_such_schema", JSON: true, Quiet: true},
			exitUsage, `ingest: -schema "no_such_schema" is not in the configuration`},
		{"missing file", fileOptions{File: filepath.Join(t.TempDir(), "absent.jsonl"), ConfigPath: configPath, JSON: true, Quiet: true},
			exitError, "no such file or directory"},
		{"bad configuration", fileOptions{File: file, ConfigPath: badConfig, JSON: true, Quiet: true},
			exitError, "no_such_field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { // not parallel: the check below runs after them
			code, stdout, stderr := runCommand(t, tt.o, env)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.wantStderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
	// Nothing was ingested by any of them.
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
}
