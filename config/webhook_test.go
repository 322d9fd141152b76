package config

import (
	"strings"
	"testing"
	"time"
)

func TestWebhooks(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
ingest:
  webhooks:
    - name: zendesk
      id: /ticket/id
      text: /ticket/description
      metadata: {channel: /ticket/via/channel}
      signature: {scheme: zendesk, secret_env: ZENDESK_WEBHOOK_SECRET, tolerance: 2m}
    - name: stripe
      schema: customer_message
      id: /id
      text: /data/object/description
      metadata: /data/object/metadata
`))
	if err != nil {
		t.Fatal(err)
	}
	ws := c.Ingest.Webhooks
	if len(ws) != 2 || ws[0].Metadata.Keys["channel"] != "/ticket/via/channel" || ws[0].Signature.Tolerance != 2*time.Minute ||
		ws[1].Metadata.Pointer != "/data/object/metadata" || ws[1].Signature != nil {
		t.Fatalf("%+v", ws)
	}
	if len(Default().Ingest.Webhooks) != 0 {
		t.Error("the defaults configure a webhook")
	}
	for _, c := range []struct{ yaml, want string }{
		{`[{name: "a b", id: /i, text: /t}]`, `ingest.webhooks[0].name: "a b"`},
		{`[{name: a, id: /i, text: /t}, {name: a, id: /i, text: /t}]`, `ingest.webhooks[1].name: "a" appears twice`},
		{`[{name: a, text: /t}]`, "ingest.webhooks[0]: id and text are required"},
		{`[{name: a, id: ticket/id, text: /t}]`, `ingest.webhooks[0].id: "ticket/id" is not a JSON Pointer`},
		{`[{name: a, id: /i, text: /t, metadata: {ch: "/a~"}}]`, `ingest.webhooks[0].metadata.ch:`},
		{`[{name: a, id: /i, text: /t, metadata: [/a]}]`, "metadata is a pointer (/ticket) or a map"},
		{`[{name: a, id: /i, text: /t, schema: nosuch}]`, `ingest.webhooks[0].schema: "nosuch"`},
		{`[{name: a, id: /i, text: /t, signature: {scheme: md5, secret_env: S}}]`, `ingest.webhooks[0].signature.scheme: "md5"`},
		{`[{name: a, id: /i, text: /t, signature: {scheme: github}}]`, "set one of secret_env"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: github, secret_env: S, secret_file: f}}]`, "set one of secret_env"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: github, secret_env: S, secret: x}}]`, `unknown key "secret"`},
		{`[{name: a, id: /i, text: /t, signature: {scheme: hmac-sha256, secret_env: S}}]`, "ingest.webhooks[0].signature.header: scheme hmac-sha256 needs"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: hmac-sha256, secret_env: S, header: X, encoding: b32}}]`, `ingest.webhooks[0].signature.encoding: "b32"`},
		{`[{name: a, id: /i, text: /t, signature: {scheme: github, secret_env: S, encoding: hex}}]`, "ingest.webhooks[0].signature.encoding, prefix: only scheme hmac-sha256"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: github, secret_env: S, tolerance: 1m}}]`, "ingest.webhooks[0].signature.tolerance: scheme github signs no timestamp"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: hmac-sha256, secret_env: S, header: X, tolerance: 1m}}]`, "ingest.webhooks[0].signature.tolerance: scheme hmac-sha256"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: github, secret_env: S, replay_memory: 5}}]`, "ingest.webhooks[0].signature.replay_memory: scheme github"},
		{`[{name: a, id: /i, text: /t, signature: {scheme: stripe, secret_env: S, timestamp_header: X}}]`, "ingest.webhooks[0].signature.timestamp_header: scheme stripe"},
	} {
		_, err := Parse([]byte("ingest:\n  webhooks: " + c.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.want)
		}
	}
}
