package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scheme is how a sender signs its webhooks: which headers carry the
// signature and its timestamp, what is signed, and how the HMAC-SHA256 is
// written. Every scheme's MAC is HMAC-SHA256 keyed by the secret's bytes
// as configured (a Stripe "whsec_..." secret whole, as Stripe's libraries
// use it).
type Scheme string

// The schemes, each as its sender documents it.
const (
	// SchemeStripe: header Stripe-Signature, "t=1492774577,v1=5257a8...",
	// one t (Unix seconds) and one or more v1 (hex; several while a
	// secret is rolled), over "t.body"; other keys (v0, the test-mode
	// scheme) are ignored. Stripe's libraries allow 300 s of skew.
	// https://docs.stripe.com/webhooks#verify-manually, and
	// stripe-ruby's Stripe::Webhook::Signature.verify_header.
	SchemeStripe Scheme = "stripe"
	// SchemeGitHub: header X-Hub-Signature-256, "sha256=" and the hex
	// HMAC of the body. It has no timestamp, so no window: a replay is
	// the same message again, a duplicate (docs/input.md).
	// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
	SchemeGitHub Scheme = "github"
	// SchemeSlack: header X-Slack-Signature, "v0=" and the hex HMAC of
	// "v0:" + X-Slack-Request-Timestamp (Unix seconds) + ":" + body;
	// Slack asks to refuse a timestamp more than five minutes away.
	// https://api.slack.com/authentication/verifying-requests-from-slack
	SchemeSlack Scheme = "slack"
	// SchemeZendesk: header X-Zendesk-Webhook-Signature, the base64 HMAC
	// of X-Zendesk-Webhook-Signature-Timestamp (RFC 3339, such as
	// "2021-07-25T10:00:00Z") + body.
	// https://developer.zendesk.com/documentation/webhooks/verifying/
	// ("base64(HMACSHA256(TIMESTAMP + BODY))"). One revision of the
	// event connectors' copy of that page wrote (BODY)(TIMESTAMP), with
	// an example signed so; the main page, and the copy's other
	// revisions, say TIMESTAMP + BODY, which is taken here.
	SchemeZendesk Scheme = "zendesk"
	// SchemeHMAC: a plain HMAC-SHA256 of the body in Header, hex or
	// base64 (Encoding) after an optional Prefix: Shopify's
	// X-Shopify-Hmac-Sha256 (base64), and GitHub's form under another
	// header. No timestamp, so no window.
	SchemeHMAC Scheme = "hmac-sha256"
)

// Schemes are the schemes a Verifier takes.
var Schemes = []Scheme{SchemeStripe, SchemeGitHub, SchemeSlack, SchemeZendesk, SchemeHMAC}

// DefaultTolerance is how far a signed timestamp may be from the
// server's clock, either way, when Verifier.Tolerance is 0: the 300 s of
// Stripe's libraries and of Slack's five minutes.
const DefaultTolerance = 5 * time.Minute

// Encodings of SchemeHMAC.
const (
	EncodingHex    = "hex"
	EncodingBase64 = "base64"
)

// Verifier checks the signature of a webhook's requests.
type Verifier struct {
	Scheme Scheme
	// Secret is the HMAC key. Required; it is never logged or put in an
	// error.
	Secret []byte
	// Header is the header carrying the signature; default the scheme's
	// (SchemeHMAC has none: required there).
	Header string
	// TimestampHeader is the header carrying the signed timestamp of
	// SchemeSlack and SchemeZendesk; default the scheme's.
	TimestampHeader string
	// Tolerance is how far the signed timestamp may be from Now, either
	// way; default DefaultTolerance. Schemes without a timestamp ignore it.
	Tolerance time.Duration
	// Encoding (EncodingHex or EncodingBase64) and Prefix ("sha256=",
	// say) are SchemeHMAC's; default hex and none.
	Encoding string
	Prefix   string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Kinds of SignatureError.
const (
	// KindMissing: no signature header, or no timestamp header.
	KindMissing = "missing"
	// KindInvalid: a header that does not parse, or a signature that is
	// not the body's (a wrong secret, or a body changed on the way).
	KindInvalid = "invalid"
	// KindExpired: a valid signature whose timestamp is outside the
	// tolerance.
	KindExpired = "expired"
)

// SignatureError is why Verify refused a request: Kind and a message
// naming the header. It never holds the secret or the expected MAC.
type SignatureError struct {
	Kind   string
	Reason string
}

func (e *SignatureError) Error() string { return e.Reason }

// Signed is what Verify found in a request whose signature is right.
type Signed struct {
	// MAC is the HMAC-SHA256 that matched: the key of a ReplayMemory.
	MAC [sha256.Size]byte
	// Timestamp is the signed time; zero for a scheme without one.
	Timestamp time.Time
}

// Check reports the first field of v that is wrong, named as the
// configuration does ("scheme", "header", ...).
func (v *Verifier) Check() error {
	switch v.Scheme {
	case SchemeStripe, SchemeGitHub, SchemeSlack, SchemeZendesk:
		if v.Encoding != "" || v.Prefix != "" {
			return fmt.Errorf("encoding, prefix: only scheme %s takes them; %s has its own", SchemeHMAC, v.Scheme)
		}
	case SchemeHMAC:
		if v.Header == "" {
			return fmt.Errorf("header: scheme %s needs the name of the header carrying the signature", SchemeHMAC)
		}
		if v.Encoding != "" && v.Encoding != EncodingHex && v.Encoding != EncodingBase64 {
			return fmt.Errorf("encoding: %q is not %s or %s", v.Encoding, EncodingHex, EncodingBase64)
		}
	default:
		return fmt.Errorf("scheme: %q is not one of %s", v.Scheme, joinSchemes())
	}
	if v.TimestampHeader != "" && v.Scheme != SchemeSlack && v.Scheme != SchemeZendesk {
		return fmt.Errorf("timestamp_header: scheme %s carries no timestamp in a header of its own", v.Scheme)
	}
	if v.Tolerance != 0 && v.Scheme != SchemeStripe && v.Scheme != SchemeSlack && v.Scheme != SchemeZendesk {
		return fmt.Errorf("tolerance: scheme %s signs no timestamp, so there is none to bound; only %s, %s and %s take it",
			v.Scheme, SchemeStripe, SchemeSlack, SchemeZendesk)
	}
	if len(v.Secret) == 0 {
		return errors.New("secret: empty")
	}
	if v.Tolerance < 0 {
		return fmt.Errorf("tolerance: %v is negative", v.Tolerance)
	}
	return nil
}

func joinSchemes() string {
	s := make([]string, len(Schemes))
	for i, x := range Schemes {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// SignatureHeader is the header v reads the signature from.
func (v *Verifier) SignatureHeader() string {
	if v.Header != "" {
		return v.Header
	}
	return map[Scheme]string{SchemeStripe: "Stripe-Signature", SchemeGitHub: "X-Hub-Signature-256",
		SchemeSlack: "X-Slack-Signature", SchemeZendesk: "X-Zendesk-Webhook-Signature"}[v.Scheme]
}

// timestampHeader is the header v reads the timestamp from, "" for none.
func (v *Verifier) timestampHeader() string {
	if v.TimestampHeader != "" {
		return v.TimestampHeader
	}
	return map[Scheme]string{SchemeSlack: "X-Slack-Request-Timestamp", SchemeZendesk: "X-Zendesk-Webhook-Signature-Timestamp"}[v.Scheme]
}

// HasTimestamp reports whether v's scheme signs a timestamp, so that a
// replay can be refused within its window.
func (v *Verifier) HasTimestamp() bool {
	return v.Scheme == SchemeStripe || v.Scheme == SchemeSlack || v.Scheme == SchemeZendesk
}

// Window is the tolerance of v: how long a signed timestamp is taken.
func (v *Verifier) Window() time.Duration {
	if v.Tolerance > 0 {
		return v.Tolerance
	}
	return DefaultTolerance
}

// maxSignatureHeader bounds the signature header read, in bytes: a
// Stripe header with a few v1 values is some 200.
const maxSignatureHeader = 4096

// Verify checks the signature of a request with header h and body body.
// Every MAC is compared in constant time (hmac.Equal). The error is a
// *SignatureError: KindMissing, KindInvalid or KindExpired. A timestamp
// is checked only once the signature over it is right, as Stripe's
// libraries do, so an expired answer tells a forger nothing.
func (v *Verifier) Verify(h http.Header, body []byte) (Signed, error) {
	var out Signed
	name := v.SignatureHeader()
	vals := h.Values(name)
	if len(vals) == 0 || strings.TrimSpace(vals[0]) == "" {
		return out, &SignatureError{KindMissing, fmt.Sprintf("no %s header: this webhook's requests must be signed (scheme %s)", name, v.Scheme)}
	}
	if len(vals) > 1 {
		return out, &SignatureError{KindInvalid, fmt.Sprintf("the %s header is given %d times; give it once", name, len(vals))}
	}
	sig := strings.TrimSpace(vals[0])
	if len(sig) > maxSignatureHeader {
		return out, &SignatureError{KindInvalid, fmt.Sprintf("the %s header is %d bytes; a signature is at most %d", name, len(sig), maxSignatureHeader)}
	}
	var (
		ts      string // the timestamp as signed
		at      time.Time
		payload [][]byte // signed: their concatenation
		macs    [][]byte // candidates; one must match
	)
	if th := v.timestampHeader(); th != "" {
		tv := h.Values(th)
		if len(tv) == 0 || strings.TrimSpace(tv[0]) == "" {
			return out, &SignatureError{KindMissing, fmt.Sprintf("no %s header: scheme %s signs a timestamp", th, v.Scheme)}
		}
		if len(tv) > 1 {
			return out, &SignatureError{KindInvalid, fmt.Sprintf("the %s header is given %d times; give it once", th, len(tv))}
		}
		ts = strings.TrimSpace(tv[0])
	}
	var err error
	switch v.Scheme {
	case SchemeStripe:
		ts, macs, err = parseStripe(sig)
		if err != nil {
			return out, &SignatureError{KindInvalid, fmt.Sprintf("the %s header %v", name, err)}
		}
		payload = [][]byte{[]byte(ts), []byte("."), body}
	case SchemeGitHub:
		macs, err = decodeMAC(sig, "sha256=", EncodingHex)
		payload = [][]byte{body}
	case SchemeSlack:
		macs, err = decodeMAC(sig, "v0=", EncodingHex)
		payload = [][]byte{[]byte("v0:" + ts + ":"), body}
	case SchemeZendesk:
		macs, err = decodeMAC(sig, "", EncodingBase64)
		payload = [][]byte{[]byte(ts), body}
	case SchemeHMAC:
		enc := v.Encoding
		if enc == "" {
			enc = EncodingHex
		}
		macs, err = decodeMAC(sig, v.Prefix, enc)
		payload = [][]byte{body}
	default:
		return out, &SignatureError{KindInvalid, fmt.Sprintf("scheme %q is not known", v.Scheme)}
	}
	if err != nil {
		return out, &SignatureError{KindInvalid, fmt.Sprintf("the %s header %v", name, err)}
	}
	if v.HasTimestamp() {
		if at, err = parseTimestamp(v.Scheme, ts); err != nil {
			return out, &SignatureError{KindInvalid, err.Error()}
		}
	}
	mac := hmac.New(sha256.New, v.Secret)
	for _, p := range payload {
		mac.Write(p)
	}
	want := mac.Sum(nil)
	matched := false
	for _, m := range macs {
		// Every candidate is compared, matched or not, so the time taken
		// does not say which one matched.
		if hmac.Equal(m, want) {
			matched = true
		}
	}
	if !matched {
		return out, &SignatureError{KindInvalid, fmt.Sprintf("the %s header is not a signature of this body with this webhook's secret "+
			"(a wrong secret, or a body changed on the way)", name)}
	}
	copy(out.MAC[:], want)
	if v.HasTimestamp() {
		now := time.Now
		if v.Now != nil {
			now = v.Now
		}
		skew := now().Sub(at)
		if skew < 0 {
			skew = -skew
		}
		if skew > v.Window() {
			return out, &SignatureError{KindExpired, fmt.Sprintf("the signed timestamp %s is %v away from this server's clock; "+
				"the limit is %v: a request is taken only within that window, so an old one cannot be replayed", ts, skew.Round(time.Second), v.Window())}
		}
		out.Timestamp = at
	}
	return out, nil
}

// parseStripe splits a Stripe-Signature value into its timestamp and its
// v1 signatures (hex). Keys other than t and v1 are ignored, as Stripe's
// libraries ignore them; the error says what is missing or malformed.
func parseStripe(sig string) (ts string, macs [][]byte, err error) {
	var nt int
	for _, part := range strings.Split(sig, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", nil, fmt.Errorf("has %q, not key=value (t=UNIX_SECONDS,v1=HEX)", trim(part))
		}
		switch k {
		case "t":
			nt++
			ts = val
		case "v1":
			b, err := hex.DecodeString(val)
			if err != nil || len(b) != sha256.Size {
				return "", nil, fmt.Errorf("has a v1 that is not %d hex digits", 2*sha256.Size)
			}
			macs = append(macs, b)
		}
	}
	switch {
	case nt != 1:
		return "", nil, fmt.Errorf("has %d t= timestamps, not one", nt)
	case len(macs) == 0:
		return "", nil, errors.New("has no v1= signature")
	}
	return ts, macs, nil
}

// decodeMAC reads one MAC after prefix, in enc.
func decodeMAC(sig, prefix, enc string) ([][]byte, error) {
	if !strings.HasPrefix(sig, prefix) {
		return nil, fmt.Errorf("does not start with %q", prefix)
	}
	s := sig[len(prefix):]
	var b []byte
	var err error
	if enc == EncodingBase64 {
		b, err = base64.StdEncoding.DecodeString(s)
	} else {
		b, err = hex.DecodeString(s)
	}
	if err != nil || len(b) != sha256.Size {
		what := fmt.Sprintf("%d hex digits", 2*sha256.Size)
		if enc == EncodingBase64 {
			what = fmt.Sprintf("the base64 of %d bytes", sha256.Size)
		}
		if prefix != "" {
			what = fmt.Sprintf("%q followed by %s", prefix, what)
		}
		return nil, fmt.Errorf("is not %s (an HMAC-SHA256)", what)
	}
	return [][]byte{b}, nil
}

// parseTimestamp reads a signed timestamp: Unix seconds (Stripe, Slack)
// or RFC 3339 (Zendesk).
func parseTimestamp(s Scheme, ts string) (time.Time, error) {
	if s == SchemeZendesk {
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			return time.Time{}, fmt.Errorf("the signed timestamp %q is not RFC 3339 (such as 2021-07-25T10:00:00Z)", trim(ts))
		}
		return t, nil
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return time.Time{}, fmt.Errorf("the signed timestamp %q is not Unix seconds", trim(ts))
	}
	return time.Unix(n, 0), nil
}

// trim quotes at most 40 bytes of s, for a message.
func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
