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
	"github.com/extractq/extractq/internal/startup"
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
// ingest gave up after queue.ConnectTimeout (30s), whatever
// nats.retry_time said. A NATS that never comes is given up on after
// nats.retry_time, not after queue.ConnectTimeout: a retry_time of 3s
// tells the two apart in seconds, where a NATS later than 30s took half
// a minute of the suite.
func TestIngestFileWaitsForLateNATS(t *testing.T) {
	t.Parallel()
	// freePort returns a local port nothing listens on.
	freePort := func(t *testing.T) int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	type result struct {
		code           int
		stdout, stderr string
	}
	// run starts ingestFile on the file of env; the result comes on the
	// channel.
	run := func(t *testing.T, env startup.Env, configPath, file string, log *zap.Logger) <-chan result {
		done := make(chan result, 1)
		go func() {
			var stdout, stderr strings.Builder
			code := ingestFile(t.Context(), fileOptions{File: file, ConfigPath: configPath, JSON: true, Quiet: true}, env, log, &stdout, &stderr)
			done <- result{code, stdout.String(), stderr.String()}
		}()
		return done
	}

	t.Run("Late", func(t *testing.T) {
		t.Parallel()
		e := ingesttest.NewEnv(t)
		env, configPath, file := commandSetup(t, e, 2)
		port := freePort(t)
		env.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		core, logs := observer.New(zap.WarnLevel)
		done := run(t, env, configPath, file, zap.New(core))
		// NATS comes up once ingest has tried and failed more than once.
		testsignal.Eventually(t, 20*time.Second, "two failed connection attempts", func() bool {
			return logs.FilterMessage("nats connect failed").Len() > 1
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
	})

	t.Run("GivenUpAfterRetryTime", func(t *testing.T) {
		t.Parallel()
		const retryTime = 3 * time.Second
		if retryTime >= queue.ConnectTimeout/2 {
			t.Fatalf("retry_time %s does not tell itself apart from queue.ConnectTimeout %s", retryTime, queue.ConnectTimeout)
		}
		e := ingesttest.NewEnv(t)
		env, configPath, file := commandSetup(t, e, 2)
		cfg, err := os.ReadFile(configPath)
		if err != nil {
			t.Fatal(err)
		}
		cfg = []byte(strings.Replace(string(cfg), "nats:\n", fmt.Sprintf("nats:\n  retry_time: %s\n", retryTime), 1))
		if err := os.WriteFile(configPath, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		env.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
		start := time.Now()
		var r result
		select {
		case r = <-run(t, env, configPath, file, zap.NewNop()):
		case <-time.After(2 * queue.ConnectTimeout):
			t.Fatalf("ingest still waiting for NATS after %s with nats.retry_time %s", 2*queue.ConnectTimeout, retryTime)
		}
		took := time.Since(start)
		if r.code != exitError || !strings.Contains(r.stderr, "nats") {
			t.Errorf("exit %d, stderr:\n%s\nwant exit %d naming NATS", r.code, r.stderr, exitError)
		}
		// Given up after retry_time, well before queue.ConnectTimeout
		// (which gives up a little short of it: its last back-off is not
		// slept).
		if took < retryTime || took >= queue.ConnectTimeout/2 {
			t.Errorf("ingest gave up on NATS after %s; want nats.retry_time %s (not queue.ConnectTimeout %s)", took, retryTime, queue.ConnectTimeout)
		}
	})
}
