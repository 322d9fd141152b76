package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/ingestapi/webhook"
	"github.com/extractq/extractq/ingestapi/webhook/webhooktest"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store/storetest"
)

const webhookSecret = "stripe-secret-0123456789abcdef"

// A webhook of the configuration file, its secret from the environment:
// a signed request is ingested; without its secret the server does not
// start, saying which variable, never logging the secret.
func TestServeCommandWebhook(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	configPath := filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf("nats:\n  stream: %s\n  subject_prefix: %s\ningest:\n  max_text_bytes: %d\n  webhooks:\n"+
		"    - {name: stripe, id: /id, text: /data/object/description, metadata: /data/object/metadata,\n"+
		"       signature: {scheme: stripe, secret_env: TEST_STRIPE_SECRET}}\n", e.NATS.Stream, e.NATS.SubjectPrefix, ingesttest.MaxText)
	if err := os.WriteFile(configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := startup.Env{DatabaseURL: storetest.SchemaURL(t, e.Store), NATSURL: queuetest.URL()}

	var stderr bytes.Buffer
	o := serveOptions{Addr: "127.0.0.1:0", ConfigPath: configPath, LookupEnv: func(string) (string, bool) { return "", false }}
	if code := serveCommand(t.Context(), o, env, zap.NewNop(), &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "ingest.webhooks[0] (stripe): signature.secret_env: TEST_STRIPE_SECRET is not set") {
		t.Errorf("without the secret: exit %d, %s", code, stderr.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	o.LookupEnv = func(k string) (string, bool) { return webhookSecret, k == "TEST_STRIPE_SECRET" }
	o.Listening = func(a net.Addr) { addrc <- a }
	core, logs := observer.New(zap.InfoLevel)
	codec := make(chan int, 1)
	stderr.Reset()
	go func() { codec <- serveCommand(ctx, o, env, zap.New(core), &stderr) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case code := <-codec:
		t.Fatalf("serveCommand exited %d before listening: %s", code, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("serveCommand did not listen within a minute")
	}
	body := `{"id": "evt_1", "type": "charge.dispute.created", "data": {"object": {"description": "Refund order 48213", "metadata": {"order": "48213"}}}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr.String()+"/v1/webhooks/stripe", strings.NewReader(body))
	req.Header = webhooktest.Headers(webhook.SchemeStripe, webhookSecret, "", []byte(body), time.Now())
	req.Header.Set("Content-Type", "application/json")
	if r := do(t, req, ""); r.status != http.StatusOK || r.ans.Published != 1 {
		t.Errorf("signed: %d %s", r.status, r.body)
	}
	req, _ = http.NewRequest(http.MethodPost, "http://"+addr.String()+"/v1/webhooks/stripe", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	wantError(t, "unsigned", do(t, req, ""), http.StatusUnauthorized, "signature_missing")
	cancel()
	if code := <-codec; code != exitOK {
		t.Errorf("exit %d; stderr %s", code, stderr.String())
	}
	if n := e.StreamMsgs(t); n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
	started := false
	for _, en := range logs.All() {
		all := en.Message
		for k, v := range en.ContextMap() {
			all += fmt.Sprintf(" %s=%v", k, v)
		}
		if strings.Contains(all, webhookSecret) {
			t.Errorf("logged the secret: %s", all)
		}
		started = started || (en.Message == "serving" && strings.Contains(all, "stripe (stripe)"))
	}
	if !started {
		t.Error("the start-up line does not name the webhook and its scheme")
	}
}

func TestServeWebhooksSecretFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("  file-secret-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws, err := serveWebhooksFromYAML(t, "[{name: gh, id: /i, text: /t, signature: {scheme: github, secret_file: "+file+"}}]")
	if err != nil || len(ws) != 1 || string(ws[0].Verifier.Secret) != "file-secret-0123" || ws[0].Mapping.ID != "/i" {
		t.Fatalf("%+v %v", ws, err)
	}
	if _, err := serveWebhooksFromYAML(t, "[{name: gh, id: /i, text: /t, signature: {scheme: github, secret_file: "+empty+"}}]"); err == nil ||
		!strings.Contains(err.Error(), "signature.secret_file: "+empty+" is empty") {
		t.Errorf("empty file: %v", err)
	}
}

// serveWebhooksFromYAML parses ingest.webhooks from yaml and makes the
// server's webhooks of them.
func serveWebhooksFromYAML(t *testing.T, yaml string) ([]ingestapi.Webhook, error) {
	t.Helper()
	c, err := config.Parse([]byte("ingest:\n  webhooks: " + yaml + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return serveWebhooks(c.Ingest.Webhooks, func(string) (string, bool) { return "", false })
}
