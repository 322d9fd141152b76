package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Webhook is one entry of ingest.webhooks: another system's JSON that
// `ingest serve` takes at POST /v1/webhooks/{name}, one message a request
// (docs/input.md, "Webhooks"). Each field of the message is found by a
// JSON Pointer (RFC 6901) into the body.
type Webhook struct {
	// Name is the last element of the route's path: 1 to 64 letters,
	// digits, "-" and "_". Required, once.
	Name string `yaml:"name"`
	// Schema is the schema its messages are extracted with. Default the
	// first of schemas.
	Schema string `yaml:"schema"`
	// ID is the pointer to the message id (a string or an integer), such
	// as /ticket/id. Required.
	ID string `yaml:"id"`
	// Text is the pointer to the message text (a string). Required.
	Text string `yaml:"text"`
	// Source is the pointer to the message's source (a string). Default
	// none: the source is then Name, so the ids of two senders never meet.
	Source string `yaml:"source"`
	// Metadata is a pointer to an object kept whole as the metadata
	// (metadata: /ticket), or a map of metadata keys to pointers
	// (metadata: {channel: /ticket/via/channel}). Default none.
	Metadata WebhookMetadata `yaml:"metadata"`
	// MaxBodyBytes is the largest body taken, in bytes (at most
	// `ingest serve -max-body-bytes`). Default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Signature, when set, has each request's HMAC-SHA256 signature
	// checked, and then no bearer token is needed. Without it a request
	// needs a bearer token of role admin or ingest.
	Signature *WebhookSignature `yaml:"signature"`
}

// WebhookMetadata is Webhook.Metadata: a pointer to an object
// (Pointer), or keys and a pointer each (Keys), or both empty.
type WebhookMetadata struct {
	Pointer string
	Keys    map[string]string
}

// UnmarshalYAML takes a string (a pointer) or a map of strings.
func (m *WebhookMetadata) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Decode(&m.Pointer)
	case yaml.MappingNode:
		return n.Decode(&m.Keys)
	}
	return fmt.Errorf("line %d: metadata is a pointer (/ticket) or a map of keys to pointers ({channel: /ticket/via/channel})", n.Line)
}

// WebhookSignature is Webhook.Signature: how a sender signs its requests.
type WebhookSignature struct {
	// Scheme is one of WebhookSchemes: stripe (Stripe-Signature:
	// t=...,v1=... over "t.body"), github (X-Hub-Signature-256:
	// sha256=HEX over the body), slack (X-Slack-Signature: v0=HEX over
	// "v0:ts:body", ts in X-Slack-Request-Timestamp), zendesk
	// (X-Zendesk-Webhook-Signature: base64 over ts+body, ts in
	// X-Zendesk-Webhook-Signature-Timestamp), or hmac-sha256 (Header:
	// Prefix and the HMAC of the body in Encoding). Required.
	Scheme string `yaml:"scheme"`
	// SecretEnv names the environment variable holding the secret;
	// SecretFile names a file holding it (white space around it is
	// dropped). One of the two. The secret is never logged.
	SecretEnv  string `yaml:"secret_env"`
	SecretFile string `yaml:"secret_file"`
	// Header is the header carrying the signature. Default the scheme's;
	// required for hmac-sha256.
	Header string `yaml:"header"`
	// TimestampHeader is the header carrying the signed timestamp (slack,
	// zendesk). Default the scheme's.
	TimestampHeader string `yaml:"timestamp_header"`
	// Tolerance is how far a signed timestamp may be from the server's
	// clock, either way (stripe, slack, zendesk); a signature is taken
	// once within it. Default 5m, as Stripe's libraries and Slack advise.
	Tolerance time.Duration `yaml:"tolerance"`
	// Encoding (hex or base64, default hex) and Prefix (such as
	// "sha256=", default none) are hmac-sha256's.
	Encoding string `yaml:"encoding"`
	Prefix   string `yaml:"prefix"`
	// ReplayMemory is how many signatures are remembered to refuse a
	// replay within the tolerance. Default 100000 (some 10 MB).
	ReplayMemory int `yaml:"replay_memory"`
}

// WebhookSchemes are the values of signature.scheme.
var WebhookSchemes = []string{"stripe", "github", "slack", "zendesk", "hmac-sha256"}

var webhookName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// validateWebhooks reports the first bad field of ingest.webhooks by its
// path. Pointers are checked as RFC 6901 has them; ingestapi checks them
// again, with the scheme's own rules, when the server is made.
func (c Config) validateWebhooks() error {
	seen := map[string]bool{}
	for i, w := range c.Ingest.Webhooks {
		at := fmt.Sprintf("ingest.webhooks[%d]", i)
		if !webhookName.MatchString(w.Name) {
			return fmt.Errorf("%s.name: %q: use 1 to 64 letters, digits, - and _", at, w.Name)
		}
		if seen[w.Name] {
			return fmt.Errorf("%s.name: %q appears twice", at, w.Name)
		}
		seen[w.Name] = true
		if _, ok := c.SchemaByID(w.Schema); w.Schema != "" && !ok {
			return fmt.Errorf("%s.schema: %q is not one of schemas", at, w.Schema)
		}
		if w.ID == "" || w.Text == "" {
			return fmt.Errorf("%s: id and text are required: the JSON Pointers (such as /ticket/id) to the message's id and text", at)
		}
		ptrs := []struct{ key, p string }{{"id", w.ID}, {"text", w.Text}, {"source", w.Source}, {"metadata", w.Metadata.Pointer}}
		for _, k := range slices.Sorted(maps.Keys(w.Metadata.Keys)) {
			ptrs = append(ptrs, struct{ key, p string }{"metadata." + k, w.Metadata.Keys[k]})
		}
		for _, p := range ptrs {
			if err := checkPointer(p.p); err != nil {
				return fmt.Errorf("%s.%s: %w", at, p.key, err)
			}
		}
		if w.MaxBodyBytes < 0 {
			return fmt.Errorf("%s.max_body_bytes: %d is negative", at, w.MaxBodyBytes)
		}
		if sig := w.Signature; sig != nil {
			at += ".signature"
			if !slices.Contains(WebhookSchemes, sig.Scheme) {
				return fmt.Errorf("%s.scheme: %q is not one of %s", at, sig.Scheme, strings.Join(WebhookSchemes, ", "))
			}
			if (sig.SecretEnv == "") == (sig.SecretFile == "") {
				return fmt.Errorf("%s: set one of secret_env (an environment variable's name) and secret_file", at)
			}
			if sig.Tolerance < 0 || sig.ReplayMemory < 0 {
				return fmt.Errorf("%s: tolerance and replay_memory must not be negative", at)
			}
			if err := sig.checkScheme(); err != nil {
				return fmt.Errorf("%s.%w", at, err)
			}
		}
	}
	return nil
}

// checkScheme reports the first key of s its scheme does not take, by
// its name ("header: ..."); ingestapi/webhook's Verifier.Check has the
// same rules.
func (s *WebhookSignature) checkScheme() error {
	timestamped := s.Scheme == "stripe" || s.Scheme == "slack" || s.Scheme == "zendesk"
	switch {
	case s.Scheme == "hmac-sha256" && s.Header == "":
		return errors.New("header: scheme hmac-sha256 needs the name of the header carrying the signature")
	case s.Scheme == "hmac-sha256" && s.Encoding != "" && s.Encoding != "hex" && s.Encoding != "base64":
		return fmt.Errorf("encoding: %q is not hex or base64", s.Encoding)
	case s.Scheme != "hmac-sha256" && (s.Encoding != "" || s.Prefix != ""):
		return fmt.Errorf("encoding, prefix: only scheme hmac-sha256 takes them; %s has its own", s.Scheme)
	case s.TimestampHeader != "" && s.Scheme != "slack" && s.Scheme != "zendesk":
		return fmt.Errorf("timestamp_header: scheme %s carries no timestamp in a header of its own", s.Scheme)
	case !timestamped && s.Tolerance != 0:
		return fmt.Errorf("tolerance: scheme %s signs no timestamp, so there is none to bound; only stripe, slack and zendesk take it", s.Scheme)
	case !timestamped && s.ReplayMemory != 0:
		return fmt.Errorf("replay_memory: scheme %s signs no timestamp, so replays are not remembered; only stripe, slack and zendesk take it", s.Scheme)
	}
	return nil
}

// checkPointer reports whether p is a JSON Pointer (RFC 6901, section 3).
func checkPointer(p string) error {
	if p != "" && p[0] != '/' {
		return fmt.Errorf("%q is not a JSON Pointer: it starts with \"/\" (RFC 6901), as in \"/%s\"", p, p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return errors.New("\"~\" in a JSON Pointer is followed by 0 or 1 (\"~\" is written ~0, \"/\" ~1)")
		}
	}
	return nil
}
