// Package webhooktest signs webhook requests as their senders do, for
// the tests of package webhook and of the server: written from the
// senders' documentation, apart from webhook.Verifier's code, so that a
// test of one checks the other.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/extractq/extractq/ingestapi/webhook"
)

// MAC is the HMAC-SHA256 of the concatenated parts with secret.
func MAC(secret string, parts ...string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// Headers returns the headers a sender of scheme puts on body signed
// with secret at time at (Unix seconds; RFC 3339 for Zendesk). For
// webhook.SchemeHMAC it signs as GitHub does, under header.
func Headers(scheme webhook.Scheme, secret, header string, body []byte, at time.Time) http.Header {
	h := http.Header{}
	ts := strconv.FormatInt(at.Unix(), 10)
	b := string(body)
	switch scheme {
	case webhook.SchemeStripe:
		// https://docs.stripe.com/webhooks#verify-manually
		h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(MAC(secret, ts, ".", b))+",v0=00")
	case webhook.SchemeGitHub:
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(MAC(secret, b)))
	case webhook.SchemeSlack:
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(MAC(secret, "v0:", ts, ":", b)))
	case webhook.SchemeZendesk:
		zts := at.UTC().Format(time.RFC3339)
		h.Set("X-Zendesk-Webhook-Signature-Timestamp", zts)
		h.Set("X-Zendesk-Webhook-Signature", base64.StdEncoding.EncodeToString(MAC(secret, zts, b)))
	case webhook.SchemeHMAC:
		h.Set(header, "sha256="+hex.EncodeToString(MAC(secret, b)))
	}
	return h
}
