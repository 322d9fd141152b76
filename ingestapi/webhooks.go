package ingestapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingestapi/webhook"
	"github.com/extractq/extractq/internal/httperr"
)

// webhookRoute is the route of every webhook.
const webhookRoute = "POST /v1/webhooks/{name}"

// DefaultWebhookBodyBytes is Webhook.MaxBodyBytes's default: 1 MiB, as
// POST /v1/erasures. A webhook carries one message, whose text is at most
// ingest.max_text_bytes, in its sender's object (a ticket, an event).
const DefaultWebhookBodyBytes = 1 << 20

// Webhook is one webhook POST /v1/webhooks/{Name} takes: another
// system's JSON, one message a request, mapped to a message (Mapping)
// and, with a Verifier, signed (docs/input.md, "Webhooks").
type Webhook struct {
	// Name is the last element of its path: letters, digits, "-" and
	// "_", at most 64 bytes. Required, once per server.
	Name string
	// Schema is the schema its messages are extracted with; "" is the
	// server's first (ServerConfig.Schemas).
	Schema string
	// Mapping says where the body holds the message's fields. Its
	// DefaultSource, when empty, is set to Name.
	Mapping webhook.Mapping
	// Verifier, when set, checks each request's signature, and the
	// request needs no bearer token: the signature authenticates it, and
	// any Authorization header is ignored. Without one, a request needs a
	// bearer token as POST /v1/messages does (role admin or ingest).
	Verifier *webhook.Verifier
	// ReplayMemory is how many signatures are remembered to refuse a
	// replay (webhook.ReplayMemory), for a scheme that signs a timestamp.
	// Default webhook.DefaultReplayMemory.
	ReplayMemory int
	// MaxBodyBytes is the largest body taken, in bytes, at most
	// ServerConfig.MaxBodyBytes. Default DefaultWebhookBodyBytes.
	MaxBodyBytes int64
}

// webhookName is what a webhook's name may be: a path element that needs
// no escaping.
var webhookName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// hook is a configured webhook, ready to serve.
type hook struct {
	Webhook
	replays *webhook.ReplayMemory // nil without a timestamp to bound it
	// limitKey names what sets MaxBodyBytes: the webhook's
	// max_body_bytes, or the server's -max-body-bytes when lower.
	limitKey string
}

// newHooks checks ws against cfg and returns them by name. The error
// names the webhook and the field.
func newHooks(ws []Webhook, cfg ServerConfig) (map[string]*hook, error) {
	hooks := make(map[string]*hook, len(ws))
	for i, w := range ws {
		what := fmt.Sprintf("ingest.webhooks[%d]", i)
		switch {
		case !webhookName.MatchString(w.Name):
			return nil, fmt.Errorf("%s.name: %q: use 1 to 64 letters, digits, - and _", what, w.Name)
		case hooks[w.Name] != nil:
			return nil, fmt.Errorf("%s.name: %q appears twice", what, w.Name)
		case w.Schema != "" && !slices.Contains(cfg.Schemas, w.Schema):
			return nil, fmt.Errorf("%s.schema: %q is not configured; the configured schemas are %s", what, w.Schema, strings.Join(cfg.Schemas, ", "))
		}
		if err := w.Mapping.Check(); err != nil {
			return nil, fmt.Errorf("%s.%w", what, err)
		}
		if w.Verifier != nil {
			if err := w.Verifier.Check(); err != nil {
				return nil, fmt.Errorf("%s.signature.%w", what, err)
			}
		}
		h := &hook{Webhook: w}
		h.Schema = cmp.Or(w.Schema, cfg.Schemas[0])
		h.Mapping.DefaultSource = cmp.Or(w.Mapping.DefaultSource, w.Name)
		if h.MaxBodyBytes <= 0 {
			h.MaxBodyBytes = DefaultWebhookBodyBytes
		}
		h.limitKey = fmt.Sprintf("ingest.webhooks[%d].max_body_bytes", i)
		if cfg.MaxBodyBytes < h.MaxBodyBytes {
			h.MaxBodyBytes, h.limitKey = cfg.MaxBodyBytes, "ingest serve -max-body-bytes"
		}
		if w.Verifier != nil && w.Verifier.HasTimestamp() {
			h.replays = webhook.NewReplayMemory(w.ReplayMemory)
		}
		hooks[w.Name] = h
	}
	return hooks, nil
}

// webhook is POST /v1/webhooks/{name}: one message, mapped from another
// system's JSON, as one new batch. The checks, in order: the webhook
// exists (404); its bearer token without a signature (401, 403); no
// query parameters (400); the Content-Type (415) and length (413); room
// and readiness (429, 503); the body read; with a signature, the
// signature (401 signature_*), then a replay (409 replayed); the body
// (400 invalid) and its mapping (422 unmapped); the message's own checks
// (422 unprocessable, with the report). It answers 200 with the report
// of POST /v1/messages, a duplicate too (a sender's retry is taken as
// one). Nothing is stored before the answer is known to be a 200 or a
// 422 of the message's checks. It logs one line (logRequest).
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) (err error) {
	start := time.Now()
	name := r.PathValue("name")
	rl := requestLog{route: webhookRoute, webhook: name}
	defer func() { s.logRequest(r, start, rl, err) }()
	h := s.hooks[name]
	if h == nil {
		// The configured names are not listed: the route is open to
		// anyone who can reach it, a signed webhook needs no token, and
		// a name is half of what a forger needs.
		return httperr.Errorf(httperr.NotFound, "no webhook %q (the names are in ingest.webhooks of the configuration)", name)
	}
	if h.Verifier == nil {
		if err := s.authorize(w, r, webhookRoute); err != nil {
			return err
		}
	}
	if _, err := checkQuery(r.URL.RawQuery, webhookRoute, nil); err != nil {
		return httperr.New(httperr.Invalid, err.Error())
	}
	if err := webhookContentType(r.Header); err != nil {
		return httperr.New(httperr.UnsupportedMediaType, err.Error())
	}
	rl.format, rl.schema = ingest.FormatJSON, h.Schema
	ctx, body, release, err := s.admit(w, r, &rl, admission{
		limit: h.MaxBodyBytes, tooLarge: h.tooLarge, again: "send the webhook again later",
	})
	if err != nil {
		return err
	}
	defer release()

	if h.Verifier != nil {
		signed, verr := h.Verifier.Verify(r.Header, body)
		if verr != nil {
			return signatureRefused(w, h, verr)
		}
		if h.replays != nil {
			now := time.Now()
			if h.Verifier.Now != nil {
				now = h.Verifier.Now()
			}
			if !h.replays.Reserve(signed.MAC, signed.Timestamp.Add(h.Verifier.Window()), now) {
				return httperr.Errorf(httperr.Replayed, "this signature (timestamp %s) was taken already: a signed request is taken once "+
					"within its window of %v; nothing was stored", signed.Timestamp.UTC().Format(time.RFC3339), h.Verifier.Window())
			}
			// Forgotten unless the request is taken, so the sender's retry
			// of a request answered 4xx or 5xx is not a replay.
			defer func() {
				if err != nil {
					h.replays.Release(signed.MAC)
				}
			}()
		}
	}

	// As POST /v1/messages: a compressed body, an archive, UTF-16 or
	// binary data is told as such, not as JSON that does not parse.
	if ue := ingest.Sniff(body[:min(len(body), ingest.SniffBytes)], ingest.FormatJSON); ue != nil {
		return unreadableBody(ue)
	}
	msg, err := h.Mapping.Map(body)
	if be, ok := errors.AsType[*webhook.BodyError](err); ok {
		return httperr.Errorf(httperr.Invalid, "webhook %s: %s; nothing was stored", name, be.Reason)
	}
	if me, ok := errors.AsType[*webhook.MappingError](err); ok {
		return httperr.Errorf(httperr.Unmapped, "webhook %s: the body does not fit its mapping: %s; nothing was stored", name, me)
	}
	if err != nil {
		return httperr.Internalf(err)
	}
	ing, err := ingest.New(ingest.Config{
		Store: s.cfg.Store, Publisher: s.cfg.Publisher, SchemaID: h.Schema, MaxTextBytes: s.cfg.MaxTextBytes,
		SourceName: "webhook:" + name, MaxErrors: s.cfg.MaxErrors, NATSRetryTime: s.cfg.NATSRetryTime, Logger: s.log,
	})
	if err != nil {
		rl.err = err
		return httperr.Internalf(err)
	}
	sum, runErr := ing.RunMessages(ctx, []ingest.Message{msg})
	rl.sum, rl.err = &sum, runErr
	rl.canceled = r.Context().Err() != nil
	if runErr != nil {
		return s.runFailed(ctx, w, r, sum, runErr)
	}
	rep := ingest.NewReport(sum)
	octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ocancel()
	if err := ingest.AddOutcomes(octx, s.cfg.Store, sum, &rep); err != nil {
		// The message is stored (or a duplicate): the request is taken.
		rl.err = fmt.Errorf("reading batch %s: %w", sum.BatchID, err)
		s.log.Warn("webhook taken, its outcome unread", zap.String("webhook", name), zap.Error(err))
	}
	if sum.Rejected > 0 {
		reason := ""
		if len(sum.Errors) > 0 {
			reason = sum.Errors[0].Reason
		}
		return &httperr.Error{Code: httperr.Unprocessable, Beside: &rep,
			Message: fmt.Sprintf("webhook %s: the message is rejected: %s%s; nothing was queued", name, reason, h.pointerOf(reason))}
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// tooLarge is the message of a webhook's 413: n is the body's declared
// length, or -1 when it was found too long while read. One event cannot
// be split, so it names the limit to raise.
func (h *hook) tooLarge(n int64) string {
	size := fmt.Sprintf("the body is longer than webhook %s's limit of %d bytes", h.Name, h.MaxBodyBytes)
	if n >= 0 {
		size = fmt.Sprintf("the body is %d bytes; webhook %s's limit is %d bytes", n, h.Name, h.MaxBodyBytes)
	}
	return size + " (" + h.limitKey + "); nothing was stored"
}

// pointerOf names the pointer of the field a rejection's reason starts
// with (`"text" is empty ...`): " (text is at /ticket/description)".
func (h *hook) pointerOf(reason string) string {
	for _, f := range []struct{ name, p string }{{"id", h.Mapping.ID}, {"text", h.Mapping.Text}, {"source", h.Mapping.Source}} {
		if strings.HasPrefix(reason, strconv.Quote(f.name)) && f.p != "" {
			return fmt.Sprintf(" (%s is the body's %q)", f.name, f.p)
		}
	}
	return ""
}

// signatureRefused is the answer to a request whose signature Verify
// refused with err: 401 with the code of its kind.
func signatureRefused(w http.ResponseWriter, h *hook, err error) error {
	se, ok := errors.AsType[*webhook.SignatureError](err)
	if !ok {
		return httperr.Internalf(err)
	}
	code := map[string]httperr.Code{webhook.KindMissing: httperr.SignatureMissing, webhook.KindInvalid: httperr.SignatureInvalid,
		webhook.KindExpired: httperr.SignatureExpired}[se.Kind]
	if code == "" {
		code = httperr.SignatureInvalid
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf("Signature header=%q", h.Verifier.SignatureHeader()))
	return httperr.Errorf(code, "webhook %s: %s; nothing was stored", h.Name, se.Reason)
}

// webhookContentType checks that h's Content-Type is application/json,
// in UTF-8 (or US-ASCII), without a Content-Encoding.
func webhookContentType(h http.Header) error {
	ct := h.Get("Content-Type")
	if ct == "" {
		return fmt.Errorf("no Content-Type; a webhook's body is %s", ContentTypeJSON)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("Content-Type %q does not parse: %v; a webhook's body is %s", ct, err, ContentTypeJSON)
	}
	if mt != ContentTypeJSON {
		return fmt.Errorf("Content-Type %q is not supported; a webhook's body is %s", mt, ContentTypeJSON)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
		return fmt.Errorf("charset %q: only UTF-8 is read", cs)
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return fmt.Errorf("Content-Encoding %q is not supported; send the body uncompressed", ce)
	}
	return nil
}
