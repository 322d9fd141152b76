package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store/storetest"
)

// nowhere reaches neither Postgres nor NATS: the cases using it stop
// before connecting.
var nowhere = startup.Env{DatabaseURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable", NATSURL: "nats://127.0.0.1:1"}

func runArgs(t *testing.T, env startup.Env, token string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, env, token, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestServeArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		token string
		args  []string
		code  int
		want  string
	}{
		{"help", "", []string{"serve", "-h"}, exitOK, "-token-file"},
		{"no token on all interfaces", "", []string{"serve", "-addr", "0.0.0.0:0"}, exitUsage,
			"no token is set (-api-tokens, INGEST_TOKEN or -token-file), so it serves on a loopback address only"},
		{"short INGEST_TOKEN", "short", []string{"serve"}, exitUsage, "the token of INGEST_TOKEN is 5 bytes; use at least 16"},
		{"an argument", "", []string{"serve", "messages.jsonl"}, exitUsage,
			`takes no arguments, got ["messages.jsonl"] (to ingest a file named serve: ingest ./serve)`},
		{"zero requests", "", []string{"serve", "-max-requests", "0"}, exitUsage, "-max-requests must be above 0"},
		{"unknown flag", "", []string{"serve", "-wait"}, exitUsage, "flag provided but not defined: -wait"},
		{"file usage names serve", "", []string{}, exitUsage, "ingest serve [flags]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runArgs(t, nowhere, tt.token, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr does not contain %q:\n%s", tt.want, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if tt.token != "" && strings.Contains(stderr, tt.token) {
				t.Errorf("stderr shows the token:\n%s", stderr)
			}
		})
	}
}

// A file named serve is read with ./serve, or with a flag before it:
// "serve" is the subcommand only as the first argument.
func TestFileNamedServe(t *testing.T) {
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("nats:\n  stream: %s\n  subject_prefix: %s\n", q.NATS.Stream, q.NATS.SubjectPrefix)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "serve"), []byte(`{"id": "s-1", "text": "Where is order 48213?"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	env := startup.Env{DatabaseURL: storetest.SchemaURL(t, st), NATSURL: queuetest.URL()}

	for _, tc := range []struct {
		args                  []string
		published, duplicates int
	}{
		{[]string{"-json", "-quiet", "-config", cfg, "./serve"}, 1, 0},
		{[]string{"-json", "-quiet", "-config", cfg, "serve"}, 0, 1},
	} {
		code, stdout, stderr := runArgs(t, env, "", tc.args...)
		if code != exitOK {
			t.Fatalf("ingest %s: exit %d, want 0; stderr:\n%s", strings.Join(tc.args, " "), code, stderr)
		}
		var rep ingest.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("ingest %s: stdout is not the report: %v\n%s", strings.Join(tc.args, " "), err, stdout)
		}
		if rep.Lines != 1 || rep.Published != tc.published || rep.Duplicates != tc.duplicates {
			t.Errorf("ingest %s: report %+v, want 1 line, %d published, %d duplicates", strings.Join(tc.args, " "), rep, tc.published, tc.duplicates)
		}
	}
	if n := q.Messages(t); n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
}
