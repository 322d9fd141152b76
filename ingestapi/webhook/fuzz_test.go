package webhook_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingestapi/webhook"
	"github.com/extractq/extractq/ingestapi/webhook/webhooktest"
)

// FuzzMap maps any body with pointers of any shape: it never panics, and
// a body it maps gives an id and a text taken from it, which
// ingest.CheckMessage then takes or refuses without panicking.
func FuzzMap(f *testing.F) {
	f.Add([]byte(`{"ticket": {"id": 42, "description": "Where is order 48213?", "tags": ["a"]}}`), "/ticket/id", "/ticket/description", "/ticket/tags/0")
	f.Add([]byte(`[{"a/b": {"~": "x"}}]`), "/0/a~1b/~0", "/0/a~1b/~0", "")
	f.Add([]byte(`{"a": 1e1000000, "b": "\u0000"}`), "/a", "/b", "")
	f.Fuzz(func(t *testing.T, body []byte, id, text, meta string) {
		m := webhook.Mapping{ID: id, Text: text, Metadata: map[string]string{"k": meta}}
		if m.Check() != nil {
			return
		}
		msg, err := m.Map(body)
		if err != nil {
			return
		}
		if !strings.Contains(string(body), "\\") && !strings.Contains(string(body), msg.Text) {
			t.Errorf("text %q is not in the body %q", msg.Text, body)
		}
		_, _ = ingest.CheckMessage(msg, 1<<20)
	})
}

// FuzzVerify verifies any header value for every scheme: it never
// panics, and takes no signature it was not given by the secret.
func FuzzVerify(f *testing.F) {
	body := []byte(`{"id": 1}`)
	for _, s := range webhook.Schemes {
		h := webhooktest.Headers(s, secret, "X-Signature", body, now)
		f.Add(string(s), h.Get(verifier(s).SignatureHeader()), h.Get("X-Slack-Request-Timestamp")+h.Get("X-Zendesk-Webhook-Signature-Timestamp"), body)
	}
	f.Add("stripe", "t=1,v1=,v1,=,,t", "", []byte{})
	f.Fuzz(func(t *testing.T, scheme, sig, ts string, body []byte) {
		v := verifier(webhook.Scheme(scheme))
		if v.Check() != nil {
			return
		}
		h := http.Header{}
		h.Set(v.SignatureHeader(), sig)
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Zendesk-Webhook-Signature-Timestamp", ts)
		signed, err := v.Verify(h, body)
		if err != nil {
			return
		}
		// A signature taken is the secret's over this body: signing it
		// again gives the same MAC.
		again := webhooktest.Headers(v.Scheme, secret, "X-Signature", body, now)
		if v.HasTimestamp() {
			again = webhooktest.Headers(v.Scheme, secret, "X-Signature", body, signed.Timestamp)
		}
		if _, err := v.Verify(again, body); err != nil {
			t.Errorf("taken %q over %q, but the sender's own signature is refused: %v", sig, body, err)
		}
	})
}
