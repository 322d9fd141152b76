package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
)

// Rejections reach stderr as they come, the first ingest.max_errors of
// them, then one line counts the rest; the report lists as many. Before,
// every rejection was printed, and held until the end.
func TestIngestFileRejectionsBounded(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	cfg, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configPath, []byte(strings.Replace(string(cfg), "ingest:\n", "ingest:\n  max_errors: 5\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	const bad = 3000
	for i := range bad {
		fmt.Fprintf(&b, `{"id":"bad-%d"}`+"\n", i)
	}
	b.WriteString(`{"id":"good","text":"Where is order 48213?"}` + "\n")
	file := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCommand(t, fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true, Parallel: 1}, env)
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "ingest: rejected line "); n != 5 ||
		!strings.Contains(stderr, "ingest: rejected line 5 (id \"bad-4\"): missing \"text\"\n") ||
		!strings.Contains(stderr, "ingest: and 2995 more rejected lines not listed (the first 5 are: ingest.max_errors)\n") {
		t.Errorf("stderr lists %d rejections, want lines 1-5 and a count of the rest:\n%s", n, stderr)
	}
	var rep ingest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout)
	}
	if rep.Rejected != bad || len(rep.Errors) != 5 || rep.ErrorsOmitted != bad-5 || rep.Published != 1 {
		t.Errorf("report: %d rejected, %d listed, %d omitted, %d published; want %d, 5, %d, 1",
			rep.Rejected, len(rep.Errors), rep.ErrorsOmitted, rep.Published, bad, bad-5)
	}
}

// A NATS started after ingest is waited for as long as Postgres would be
// (nats.retry_time, 2m by default), and the file is ingested. Before,
// ingest gave up after queue.ConnectTimeout (30s): this NATS starts
// later than that.
func TestIngestFileWaitsForLateNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past 30s for its NATS")
	}
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, file := commandSetup(t, e, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	env.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	core, logs := observer.New(zap.WarnLevel)
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr strings.Builder
		code := ingestFile(t.Context(), fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true}, env, zap.New(core), &stdout, &stderr)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	testsignal.Eventually(t, 10*time.Second, "a failed connection attempt", func() bool {
		return logs.FilterMessage("nats connect failed").Len() > 0
	})
	first := logs.FilterMessage("nats connect failed").All()[0].Time
	// NATS comes up once ingest has been waiting longer than it used to.
	testsignal.Eventually(t, 2*queue.ConnectTimeout, "ingest to wait past the old limit", func() bool {
		return time.Since(first) > queue.ConnectTimeout+time.Second
	})
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	r := <-done
	var rep ingest.Report
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Published != 2 {
		t.Fatalf("exit %d, stdout %s, stderr:\n%s\nwant 2 published", r.code, r.stdout, r.stderr)
	}
}
