package webhook_test

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/ingestapi/webhook"
	"github.com/extractq/extractq/ingestapi/webhook/webhooktest"
)

const secret = "whsec_test_0123456789abcdef"

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func verifier(s webhook.Scheme) *webhook.Verifier {
	v := &webhook.Verifier{Scheme: s, Secret: []byte(secret), Now: func() time.Time { return now }}
	if s == webhook.SchemeHMAC {
		v.Header, v.Prefix = "X-Signature", "sha256="
	}
	return v
}

// GitHub's own example: secret "It's a Secret to Everybody", body
// "Hello, World!" (docs.github.com, "Validating webhook deliveries",
// "Testing the webhook payload validation").
func TestVerifyGitHubDocumentedExample(t *testing.T) {
	t.Parallel()
	v := &webhook.Verifier{Scheme: webhook.SchemeGitHub, Secret: []byte("It's a Secret to Everybody")}
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	signed, err := v.Verify(h, []byte("Hello, World!"))
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(signed.MAC[:]) != "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17" || !signed.Timestamp.IsZero() {
		t.Errorf("signed %+v", signed)
	}
}

// Each scheme takes its sender's signature, and refuses it unsigned,
// with another secret, over a changed body, or (with a timestamp) too
// old or too far ahead, each with its kind.
func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"ticket":{"id":42,"description":"Where is order 48213?"}}`)
	for _, s := range webhook.Schemes {
		t.Run(string(s), func(t *testing.T) {
			t.Parallel()
			v := verifier(s)
			if err := v.Check(); err != nil {
				t.Fatal(err)
			}
			kind := func(err error) string {
				var se *webhook.SignatureError
				if !errors.As(err, &se) {
					return "not a SignatureError: " + err.Error()
				}
				if strings.Contains(se.Error(), secret) {
					t.Errorf("the error holds the secret: %v", se)
				}
				return se.Kind
			}
			signed, err := v.Verify(webhooktest.Headers(s, secret, "X-Signature", body, now), body)
			if err != nil {
				t.Fatalf("signed: %v", err)
			}
			if v.HasTimestamp() != !signed.Timestamp.IsZero() {
				t.Errorf("timestamp %v, scheme has one: %v", signed.Timestamp, v.HasTimestamp())
			}
			if _, err := v.Verify(http.Header{}, body); err == nil || kind(err) != webhook.KindMissing {
				t.Errorf("unsigned: %v, want missing", err)
			}
			if _, err := v.Verify(webhooktest.Headers(s, "another secret", "X-Signature", body, now), body); err == nil || kind(err) != webhook.KindInvalid {
				t.Errorf("wrong secret: %v, want invalid", err)
			}
			tampered := []byte(strings.Replace(string(body), "48213", "48214", 1))
			if _, err := v.Verify(webhooktest.Headers(s, secret, "X-Signature", body, now), tampered); err == nil || kind(err) != webhook.KindInvalid {
				t.Errorf("tampered: %v, want invalid", err)
			}
			h := webhooktest.Headers(s, secret, "X-Signature", body, now)
			h.Set(v.SignatureHeader(), "x"+h.Get(v.SignatureHeader()))
			if _, err := v.Verify(h, body); err == nil || kind(err) != webhook.KindInvalid {
				t.Errorf("malformed: %v, want invalid", err)
			}
			for _, at := range []time.Time{now.Add(-6 * time.Minute), now.Add(6 * time.Minute)} {
				_, err := v.Verify(webhooktest.Headers(s, secret, "X-Signature", body, at), body)
				switch {
				case v.HasTimestamp() && (err == nil || kind(err) != webhook.KindExpired):
					t.Errorf("signed at %v: %v, want expired", at, err)
				case !v.HasTimestamp() && err != nil:
					t.Errorf("signed at %v: %v; the scheme has no timestamp", at, err)
				}
			}
			if v.HasTimestamp() {
				// Within the window, either way.
				for _, at := range []time.Time{now.Add(-4 * time.Minute), now.Add(4 * time.Minute)} {
					if _, err := v.Verify(webhooktest.Headers(s, secret, "X-Signature", body, at), body); err != nil {
						t.Errorf("signed at %v: %v", at, err)
					}
				}
			}
		})
	}
}

// Stripe: several v1 signatures (a secret being rolled) are each tried;
// other schemes (v0) are ignored; t given twice or missing is invalid.
func TestVerifyStripeHeader(t *testing.T) {
	t.Parallel()
	v := verifier(webhook.SchemeStripe)
	body := []byte(`{"id":"evt_1"}`)
	good := webhooktest.Headers(webhook.SchemeStripe, secret, "", body, now).Get("Stripe-Signature")
	ts, rest, _ := strings.Cut(good, ",")
	for _, c := range []struct {
		header string
		ok     bool
		want   string
	}{
		{ts + ",v1=" + strings.Repeat("ab", 32) + "," + rest, true, ""},
		{ts + ",v0=" + strings.Repeat("ab", 32) + "," + rest + ",scheme=x", true, ""},
		{rest, false, "0 t= timestamps"},
		{ts + "," + ts + "," + rest, false, "2 t= timestamps"},
		{ts, false, "no v1= signature"},
		{ts + ",v1=zz", false, "not 64 hex digits"},
		{ts + ",garbage," + rest, false, "not key=value"},
		{"t=yesterday," + rest, false, "not Unix seconds"},
	} {
		h := http.Header{}
		h.Set("Stripe-Signature", c.header)
		_, err := v.Verify(h, body)
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want ok %v or %q", c.header, err, c.ok, c.want)
		}
	}
}

func TestVerifierCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    webhook.Verifier
		want string
	}{
		{webhook.Verifier{Scheme: "hmac-md5", Secret: []byte("s")}, `scheme: "hmac-md5" is not one of stripe, github`},
		{webhook.Verifier{Scheme: webhook.SchemeGitHub}, "secret: empty"},
		{webhook.Verifier{Scheme: webhook.SchemeGitHub, Secret: []byte("s"), Tolerance: time.Minute}, "tolerance: scheme github signs no timestamp"},
		{webhook.Verifier{Scheme: webhook.SchemeHMAC, Secret: []byte("s"), Header: "X", Tolerance: time.Minute}, "tolerance: scheme hmac-sha256"},
		{webhook.Verifier{Scheme: webhook.SchemeHMAC, Secret: []byte("s")}, "header: scheme hmac-sha256 needs"},
		{webhook.Verifier{Scheme: webhook.SchemeHMAC, Secret: []byte("s"), Header: "X", Encoding: "base32"}, `encoding: "base32"`},
		{webhook.Verifier{Scheme: webhook.SchemeGitHub, Secret: []byte("s"), Prefix: "x"}, "only scheme hmac-sha256"},
		{webhook.Verifier{Scheme: webhook.SchemeStripe, Secret: []byte("s"), TimestampHeader: "X-T"}, "timestamp_header: scheme stripe"},
		{webhook.Verifier{Scheme: webhook.SchemeSlack, Secret: []byte("s"), Tolerance: -1}, "tolerance"},
	} {
		if err := c.v.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.v, err, c.want)
		}
	}
}

// A signature that is not a MAC at all is told by what it should be.
func TestVerifyGarbageSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"1"}`)
	for _, c := range []struct {
		scheme         webhook.Scheme
		header, reason string
	}{
		{webhook.SchemeZendesk, "X-Zendesk-Webhook-Signature", "the X-Zendesk-Webhook-Signature header is not the base64 of 32 bytes (an HMAC-SHA256)"},
		{webhook.SchemeGitHub, "X-Hub-Signature-256", `the X-Hub-Signature-256 header is not "sha256=" followed by 64 hex digits (an HMAC-SHA256)`},
	} {
		h := webhooktest.Headers(c.scheme, secret, "", body, now)
		h.Set(c.header, "sha256=garbage")
		_, err := verifier(c.scheme).Verify(h, body)
		if err == nil || err.Error() != c.reason {
			t.Errorf("%s: %v, want %q", c.scheme, err, c.reason)
		}
	}
}
