package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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

// serveConfig writes a configuration file naming e's stream.
func serveConfig(t *testing.T, e *ingesttest.Env) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf("nats:\n  stream: %s\n  subject_prefix: %s\ningest:\n  max_text_bytes: %d\n", e.NATS.Stream, e.NATS.SubjectPrefix, ingesttest.MaxText)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeCommandRefuses(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// None reaches Postgres or NATS: the env points nowhere.
	env := startup.Env{DatabaseURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable", NATSURL: "nats://127.0.0.1:1"}
	tests := []struct {
		name string
		o    serveOptions
		want string
	}{
		{"no token, all interfaces", serveOptions{Addr: "0.0.0.0:0"},
			"no token is set (-api-tokens, INGEST_TOKEN or -token-file), so it serves on a loopback address only, and -addr 0.0.0.0:0 listens on "},
		{"no token, empty host", serveOptions{Addr: ":0"}, "no token is set"},
		{"short token", serveOptions{Addr: "127.0.0.1:0", Token: "secret"}, "the token of INGEST_TOKEN is 6 bytes; use at least 16"},
		{"token with a space", serveOptions{Addr: "127.0.0.1:0", Token: "0123456789 abcdef"}, "holds white space"},
		{"both tokens", serveOptions{Addr: "127.0.0.1:0", Token: testToken, TokenFile: tokenFile}, "both INGEST_TOKEN and -token-file are set"},
		{"empty token file", serveOptions{Addr: "127.0.0.1:0", TokenFile: emptyFile}, "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			code := serveCommand(t.Context(), tt.o, env, zap.NewNop(), &stderr)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.want)
			}
			if strings.Contains(stderr.String(), testToken) || (tt.o.Token != "" && strings.Contains(stderr.String(), tt.o.Token)) {
				t.Errorf("stderr shows the token: %s", stderr.String())
			}
		})
	}
}

// serveCommand end to end: a token from a file, a POST, then a shutdown
// as by SIGTERM; and without a token, on a loopback address.
func TestServeCommand(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	configPath := serveConfig(t, e)
	env := startup.Env{DatabaseURL: storetest.SchemaURL(t, e.Store), NATSURL: queuetest.URL()}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(o serveOptions, auth string, id string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		addrc := make(chan net.Addr, 1)
		o.Addr, o.ConfigPath, o.Listening = "127.0.0.1:0", configPath, func(a net.Addr) { addrc <- a }
		var stderr bytes.Buffer
		codec := make(chan int, 1)
		go func() { codec <- serveCommand(ctx, o, env, zap.NewNop(), &stderr) }()
		var addr net.Addr
		select {
		case addr = <-addrc:
		case code := <-codec:
			t.Fatalf("serveCommand exited %d before listening: %s", code, stderr.String())
		case <-time.After(time.Minute):
			t.Fatal("serveCommand did not listen within a minute")
		}
		req, err := http.NewRequest(http.MethodPost, "http://"+addr.String()+"/v1/messages?name=cmd", strings.NewReader(`{"id": "`+id+`", "text": "Where is order 48213?"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		r := do(t, req, auth)
		if r.status != http.StatusOK || r.ans.Published != 1 {
			t.Errorf("POST: %d %s, want 200 with 1 published", r.status, r.body)
		}
		if auth != "" {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr.String()+"/v1/messages", strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/x-ndjson")
			wantError(t, "POST without the token", do(t, req, ""), http.StatusUnauthorized, "unauthenticated")
		}
		cancel()
		select {
		case code := <-codec:
			if code != exitOK {
				t.Errorf("exit %d after the shutdown, want 0; stderr %s", code, stderr.String())
			}
		case <-time.After(time.Minute):
			t.Fatal("serveCommand did not return after its context ended")
		}
	}
	run(serveOptions{TokenFile: tokenFile}, "Bearer "+testToken, "cmd-1")
	run(serveOptions{}, "", "cmd-2")
	if n := e.StreamMsgs(t); n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}
}

// testToken is the bearer token of the test servers.
const testToken = "test-token-0123456789abcdef"

// reply is a response read in full: its status, body, and the body read
// as the report or an error.
type reply struct {
	status int
	body   []byte
	ans    struct {
		ingest.Report
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
}

// do sends req with the Authorization auth (none when "") and reads the
// reply.
func do(t *testing.T, req *http.Request, auth string) reply {
	t.Helper()
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, body: b}
	if err := json.Unmarshal(b, &r.ans); err != nil {
		t.Errorf("%s %s: body is not JSON: %v\n%s", req.Method, req.URL, err, b)
	}
	return r
}

// wantError checks an error reply's status and code.
func wantError(t *testing.T, what string, r reply, status int, code string) {
	t.Helper()
	if r.status != status || r.ans.Error == nil || r.ans.Error.Code != code {
		t.Errorf("%s: status %d, body %s; want %d with error code %q", what, r.status, r.body, status, code)
	}
}

// TestServeMetricsApart: with -metrics-addr, GET /metrics is served there
// and not on the API's port, which answers it 404 (deploy/k8s exposes
// the API's port only); GET /healthz and GET /readyz on both.
func TestServeMetricsApart(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env := startup.Env{DatabaseURL: storetest.SchemaURL(t, e.Store), NATSURL: queuetest.URL()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc, metricsc := make(chan net.Addr, 1), make(chan net.Addr, 1)
	o := serveOptions{Token: testToken, Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", ConfigPath: serveConfig(t, e),
		Listening: func(a net.Addr) { addrc <- a }, MetricsListening: func(a net.Addr) { metricsc <- a }}
	var stderr bytes.Buffer
	codec := make(chan int, 1)
	go func() { codec <- serveCommand(ctx, o, env, zap.NewNop(), &stderr) }()
	var addr, metrics net.Addr
	for addr == nil || metrics == nil {
		select {
		case addr = <-addrc:
		case metrics = <-metricsc:
		case code := <-codec:
			t.Fatalf("serveCommand exited %d before listening: %s", code, stderr.String())
		case <-time.After(time.Minute):
			t.Fatal("serveCommand did not listen within a minute")
		}
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if status, body := get("http://" + addr.String() + "/metrics"); status != http.StatusNotFound || strings.Contains(body, "extractq_ingest") {
		t.Errorf("GET /metrics on the API's port: %d %s, want 404 without metrics", status, body)
	}
	if status, body := get("http://" + metrics.String() + "/metrics"); status != http.StatusOK || !strings.Contains(body, "extractq_ingest_http_requests_in_flight") {
		t.Errorf("GET /metrics on -metrics-addr: %d, want 200 with the ingest metrics:\n%s", status, body)
	}
	// Probes may use the metrics port, as triage's.
	for path, want := range map[string]string{"/healthz": `"ok"`, "/readyz": `"ready"`} {
		for _, a := range []net.Addr{metrics, addr} {
			if status, body := get("http://" + a.String() + path); status != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("GET %s on %s: %d %s, want 200 %s", path, a, status, body, want)
			}
		}
	}
	cancel()
	select {
	case code := <-codec:
		if code != exitOK {
			t.Errorf("exit %d after the shutdown, want 0; stderr %s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("serveCommand did not return after its context ended")
	}
}
