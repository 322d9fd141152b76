package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/queue/servertest"
	"github.com/extractq/extractq/store/storetest"
)

// TestMain runs triage's main instead of the tests when the test binary
// is started by a test below as a triage process.
func TestMain(m *testing.M) {
	if os.Getenv("EXTRACTQ_TEST_TRIAGE_MAIN") == "1" {
		os.Args = append([]string{"triage", "-addr", "127.0.0.1:0"}, strings.Fields(os.Getenv("EXTRACTQ_TEST_TRIAGE_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWrongNATSSettingStops: triage started with a NATS security file that
// does not exist, or with no token for a server that wants one, stops at
// start-up naming the problem, as every other command does
// (docs/configuration.md, "NATS security"), rather than warning that NATS
// is unreachable and serving without re-runs.
func TestWrongNATSSettingStops(t *testing.T) {
	t.Parallel()
	dbURL := storetest.SchemaURL(t, storetest.NewStore(t))
	tokenSrv := servertest.Start(t, "authorization { token: s3cret }")
	for name, c := range map[string]struct {
		env  []string
		want string
	}{
		"missing creds file": {[]string{"NATS_URL=nats://127.0.0.1:1", "NATS_CREDS=" + filepath.Join(t.TempDir(), "nope.creds")},
			"nats.credentials_file"},
		"refused": {[]string{"NATS_URL=" + servertest.URL(tokenSrv, "nats")}, "authorization violation"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), append(c.env, "EXTRACTQ_TEST_TRIAGE_MAIN=1", "DATABASE_URL="+dbURL,
				"CONFIG=", "LOG_LEVEL=info", "TRIAGE_METRICS_ADDR=")...)
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
			for done := false; !done; {
				select {
				case l, ok := <-lines:
					if !ok {
						done = true
						break
					}
					log.WriteString(l + "\n")
					if strings.Contains(l, "NATS unreachable") || strings.Contains(l, `"msg":"triage listening"`) {
						cmd.Process.Kill()
						cmd.Wait()
						t.Fatalf("triage went on with a wrong NATS setting:\n%s", log.String())
					}
				case <-deadline:
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("triage neither stopped nor served within a minute:\n%s", log.String())
				}
			}
			err = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit %d (%v), want 1:\n%s", code, err, log.String())
			}
			if !strings.Contains(log.String(), "connecting to NATS") || !strings.Contains(strings.ToLower(log.String()), strings.ToLower(c.want)) {
				t.Errorf("the error does not say %q at %q:\n%s", c.want, "connecting to NATS", log.String())
			}
		})
	}
}

// TestLeaseNotPositive: a -lease of 0 or less stops triage at start (exit
// 2, naming the flag); the store read it as its 10-minute default, so
// triage served claims of another length than asked, without a word.
func TestLeaseNotPositive(t *testing.T) {
	t.Parallel()
	dbURL := storetest.SchemaURL(t, storetest.NewStore(t))
	for _, lease := range []string{"0s", "-5m"} {
		t.Run(lease, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), "EXTRACTQ_TEST_TRIAGE_MAIN=1", "EXTRACTQ_TEST_TRIAGE_ARGS=-lease "+lease,
				"DATABASE_URL="+dbURL, "NATS_URL=nats://127.0.0.1:1", "CONFIG=", "LOG_LEVEL=info", "TRIAGE_METRICS_ADDR=")
			// Were the lease taken, triage would serve until the context
			// ends: stop it at its listening line.
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout = cmd.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), `"msg":"triage listening"`) {
					cmd.Process.Kill()
					break
				}
			}
			err = cmd.Wait()
			if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 2 ||
				!strings.Contains(log.String(), "triage: -lease ") || !strings.Contains(log.String(), "give a positive duration") {
				t.Fatalf("-lease %s: %v; want exit 2 naming -lease, output:\n%s", lease, err, log.String())
			}
		})
	}
}
