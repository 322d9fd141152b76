package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the worker's main instead of the tests when the test
// binary is started by a test below as a worker process.
func TestMain(m *testing.M) {
	if os.Getenv("EXTRACTQ_TEST_WORKER_MAIN") == "1" {
		os.Args = append([]string{"worker", "-health-addr", ""}, strings.Fields(os.Getenv("EXTRACTQ_TEST_WORKER_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStopWhileStarting: a worker told to stop (SIGTERM) while it still
// waits for Postgres at start-up exits 0 and says so, rather than failing
// with the cancelled wait as an error.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "EXTRACTQ_TEST_WORKER_MAIN=1",
		// Nothing listens on port 1: the worker keeps retrying Postgres.
		"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"NATS_URL=nats://127.0.0.1:1", "CONFIG=", "LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log strings.Builder
	deadline := time.After(time.Minute)
	// Stop it once it waits for Postgres: store.Open logs each retry.
	for waiting := false; !waiting; {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("worker ended before waiting for Postgres:\n%s", log.String())
			}
			log.WriteString(l + "\n")
			waiting = strings.Contains(l, `"msg":"database not ready, retrying"`)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no retry of Postgres logged within a minute:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), `"msg":"starting worker"`) {
		t.Errorf("no start-up line before the wait for Postgres:\n%s", log.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		log.WriteString(l + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker stopped with %v, want exit 0:\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), `"msg":"stopped while starting"`) {
		t.Errorf("no \"stopped while starting\" line:\n%s", log.String())
	}
}

// TestSchemaFlag: -schema is checked with the configuration before
// anything connects: with nats.consumers shared it names both keys; an
// id that is not configured names the configured ones.
func TestSchemaFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	perSchema := dir + "/per_schema.yaml"
	if err := os.WriteFile(perSchema, []byte("nats:\n  consumers: per_schema\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ config, schema, want string }{
		{"", "return_request", `worker.schema: \"return_request\" is set but nats.consumers is shared`},
		{perSchema, "invoices", `worker.schema: \"invoices\" is not a configured schema (schemas: customer_message, return_request)`},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "EXTRACTQ_TEST_WORKER_MAIN=1", "EXTRACTQ_TEST_WORKER_ARGS=-schema "+tc.schema,
			"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
			"NATS_URL=nats://127.0.0.1:1", "CONFIG="+tc.config, "LOG_LEVEL=info")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("-schema %s (config %q): %v, want exit 1 saying %s:\n%s", tc.schema, tc.config, err, tc.want, out)
		}
	}
}

// TestConcurrencyBelowZero: -concurrency -3 stops the worker at start
// (exit 2, naming the flag) before it connects to anything; it was taken
// as 0, the configuration's concurrency, without a word.
func TestConcurrencyBelowZero(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "EXTRACTQ_TEST_WORKER_MAIN=1", "EXTRACTQ_TEST_WORKER_ARGS=-concurrency -3",
		// Nothing listens on port 1: a worker that went on would keep
		// retrying Postgres until the context ends.
		"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"NATS_URL=nats://127.0.0.1:1", "CONFIG=", "LOG_LEVEL=info")
	out, err := cmd.CombinedOutput()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 2 ||
		!strings.Contains(string(out), "worker: -concurrency -3: give 1 or more") {
		t.Fatalf("-concurrency -3: %v; want exit 2 naming the flag, output:\n%s", err, out)
	}
}
