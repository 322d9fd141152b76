package ingestapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// erasureRequest is the body of POST /v1/erasures: the messages whose
// text a customer asked to have erased, and who asks.
type erasureRequest struct {
	// By names who asks for the erasure, for the audit log; required.
	By string `json:"by"`
	// Reason is the request's reference (a ticket number), for the audit
	// log; it must not hold customer text.
	Reason string `json:"reason"`
	// Messages are the keys, at most store.MaxErasureKeys distinct ones
	// (erasure.Service counts a key given twice once).
	Messages []store.MessageKey `json:"messages"`
	// DryRun answers what the erasure would do, and erases nothing.
	DryRun bool `json:"dry_run"`
}

// maxErasureBody bounds the body of POST /v1/erasures: 1,000 keys of
// generous length.
const maxErasureBody = 1 << 20

// erasures is POST /v1/erasures: it erases the text of the messages named
// (erasure.Service.Erase, one transaction) and answers 200 with the
// erasure.Result: a result per distinct key, whatever each one's status,
// and the counts. A body that is not the JSON of an erasureRequest, or
// names no message, or more than store.MaxErasureKeys distinct ones, is
// 400; one over maxErasureBody 413 (at once when its Content-Length says
// so); Postgres failing is 503, and nothing is erased then.
func (s *Server) erasures(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.readRequest(w, r, "POST /v1/erasures", nil); err != nil {
		return err
	}
	// JSON only and, as for POST /v1/messages, UTF-8 and not compressed.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != ContentTypeJSON {
		return httperr.Errorf(httperr.UnsupportedMediaType, "Content-Type %q: POST /v1/erasures takes %s", r.Header.Get("Content-Type"), ContentTypeJSON)
	}
	if _, _, err := bodyFormat(r.Header); err != nil {
		return httperr.New(httperr.UnsupportedMediaType, err.Error())
	}
	// Refused before it is read when it says it is too long.
	if r.ContentLength > maxErasureBody {
		return httperr.New(httperr.TooLarge, tooLarge(r.ContentLength, maxErasureBody))
	}
	req, err := readErasureRequest(http.MaxBytesReader(w, r.Body, maxErasureBody))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return httperr.New(httperr.TooLarge, tooLarge(-1, mbe.Limit))
		}
		return httperr.New(httperr.Invalid, err.Error())
	}
	res, err := s.erasure.Erase(r.Context(), erasure.Request{Keys: req.Messages, Actor: req.By, Via: store.ViaAPI, Reason: req.Reason,
		DryRun: req.DryRun, MaxKeys: store.MaxErasureKeys})
	if tm, ok := errors.AsType[*erasure.TooManyKeysError](err); ok {
		return httperr.Errorf(httperr.Invalid, `"messages" names %d distinct messages; at most %d in one request`, tm.Keys, tm.Max)
	}
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Warn("POST /v1/erasures", zap.Int("messages", len(req.Messages)), zap.Error(err))
		}
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		return &httperr.Error{Code: httperr.Unavailable, Message: "nothing was erased (is Postgres down?); post the same body again later", Err: err}
	}
	s.log.Info("POST /v1/erasures", zap.String("by", req.By), zap.Bool("dry_run", req.DryRun), zap.Int("messages", len(res.Results)),
		zap.Int("erased", res.Erased), zap.Int("would_erase", res.WouldErase), zap.Int("already_erased", res.AlreadyErased),
		zap.Int("not_found", res.NotFound), zap.Int("queued", res.Queued))
	writeJSON(w, http.StatusOK, res)
	return nil
}

// erasureWant is the shape of the body of POST /v1/erasures, for errors.
const erasureWant = `want {"by": NAME, "reason": TEXT, "messages": [{"source": S, "id": ID}, ...], "dry_run": false}`

// readErasureRequest decodes and checks the body of POST /v1/erasures,
// as strictly as ingest reads a line: keys are case-sensitive and given
// once, nothing follows the object, text holds no NUL, the body is UTF-8
// without a lone surrogate escape; each message's key is read by
// erasure.ParseKey. The error names what is wrong, and where.
func readErasureRequest(r io.Reader) (erasureRequest, error) {
	var req erasureRequest
	body, err := io.ReadAll(r)
	if err != nil {
		return req, err
	}
	// JSON decoding would read bytes that are not UTF-8 as U+FFFD, so an
	// id "caf\xe9" would erase the message stored as "caf\uFFFD": the
	// body is refused first, as a webhook's is.
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return req, fmt.Errorf("the body is not valid UTF-8 (byte %d): JSON is UTF-8 (RFC 8259, section 8.1), and ids are kept byte for byte; nothing was erased", i+1)
	}
	// Likewise a lone surrogate escape ("caf\ud800"), which decoding
	// reads as U+FFFD.
	if pipeline.HasLoneSurrogate(string(body)) {
		return req, fmt.Errorf("the body holds %s", erasure.LoneSurrogateRefused)
	}
	v, err := pipeline.DecodeStrict(body)
	if err != nil {
		if dk, ok := errors.AsType[*pipeline.DuplicateKeyError](err); ok {
			return req, fmt.Errorf("key %s occurs twice; give it once", dk.Path)
		}
		return req, fmt.Errorf("the body is not one JSON object: %v; %s", err, erasureWant)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return req, fmt.Errorf("the body is not a JSON object; %s", erasureWant)
	}
	for k := range obj {
		if k != "by" && k != "reason" && k != "messages" && k != "dry_run" {
			return req, fmt.Errorf("unknown key %q (keys are case-sensitive); %s", k, erasureWant)
		}
	}
	text := func(key string) (string, error) {
		switch t := obj[key].(type) {
		case nil:
			return "", nil
		case string:
			if strings.ContainsRune(t, 0) {
				return "", fmt.Errorf("%q holds a NUL character", key)
			}
			return strings.TrimSpace(t), nil
		}
		return "", fmt.Errorf("%q must be a string", key)
	}
	if req.By, err = text("by"); err != nil {
		return req, err
	}
	if req.Reason, err = text("reason"); err != nil {
		return req, err
	}
	if d, ok := obj["dry_run"]; ok {
		if req.DryRun, ok = d.(bool); !ok {
			return req, errors.New(`"dry_run" must be true or false`)
		}
	}
	list, ok := obj["messages"].([]any)
	if _, given := obj["messages"]; given && !ok {
		return req, errors.New(`"messages" must be an array of {"source": S, "id": ID}`)
	}
	for i, m := range list {
		k, err := erasure.ParseKey(m, "")
		if err != nil {
			return req, fmt.Errorf("messages[%d]: %v", i, err)
		}
		req.Messages = append(req.Messages, k)
	}
	switch {
	case req.By == "":
		return req, errors.New(`"by" is required: who asks for the erasure, for the audit log`)
	case len(req.Messages) == 0:
		return req, errors.New(`"messages" names no message`)
	}
	return req, nil
}
