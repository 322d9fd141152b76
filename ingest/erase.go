package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/extractq/extractq/store"
)

// ErasureRequest is the body of POST /v1/erasures: the messages whose
// text a customer asked to have erased, and who asks.
type ErasureRequest struct {
	// By names who asks for the erasure, for the audit log; required.
	By string `json:"by"`
	// Reason is the request's reference (a ticket number), for the audit
	// log; it must not hold customer text.
	Reason string `json:"reason"`
	// Messages are the keys, at most store.MaxErasureKeys; a key given
	// twice counts once.
	Messages []store.MessageKey `json:"messages"`
	// DryRun answers what the erasure would do, and erases nothing.
	DryRun bool `json:"dry_run"`
}

// ErasureAnswer is the answer of POST /v1/erasures: one result per
// distinct key, in the order first given, and the counts by status
// (Erased counts what would be erased, for a dry run).
type ErasureAnswer struct {
	Erased        int                   `json:"erased"`
	AlreadyErased int                   `json:"already_erased"`
	NotFound      int                   `json:"not_found"`
	Queued        int                   `json:"queued"` // not erased: a run is being extracted; ask again once it is done
	Results       []store.ErasureResult `json:"results"`
}

// maxErasureBody bounds the body of POST /v1/erasures: 1,000 keys of
// generous length.
const maxErasureBody = 1 << 20

// erasures is POST /v1/erasures: it erases the text of the messages named
// (store.MessagesErase, one transaction) and answers 200 with a result
// per key, whatever each one's status. A body that is not the JSON of an
// ErasureRequest, or names no message, or more than store.MaxErasureKeys,
// is 400; Postgres failing is 503, and nothing is erased then.
func (s *Server) erasures(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.readRequest(w, r, "POST /v1/erasures", nil); !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, ContentTypeJSON) {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("Content-Type %q: POST /v1/erasures takes %s", ct, ContentTypeJSON))
		return
	}
	req, err := readErasureRequest(http.MaxBytesReader(w, r.Body, maxErasureBody))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", tooLarge(-1, mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "bad_body", err.Error())
		return
	}
	st := s.cfg.Store
	res, err := st.MessagesErase(r.Context(), st.Pool, req.Messages, store.ErasureParams{Actor: req.By, Via: store.ViaAPI, Reason: req.Reason, DryRun: req.DryRun})
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Warn("POST /v1/erasures", zap.Int("messages", len(req.Messages)), zap.Error(err))
		}
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, http.StatusServiceUnavailable, "unavailable", "nothing was erased (is Postgres down?); post the same body again later")
		return
	}
	ans := ErasureAnswer{Results: res}
	for _, e := range res {
		switch e.Status {
		case store.ErasureErased:
			ans.Erased++
		case store.ErasureAlreadyErased:
			ans.AlreadyErased++
		case store.ErasureNotFound:
			ans.NotFound++
		case store.ErasureQueued:
			ans.Queued++
		}
	}
	s.log.Info("POST /v1/erasures", zap.String("by", req.By), zap.Bool("dry_run", req.DryRun), zap.Int("messages", len(res)), zap.Int("erased", ans.Erased),
		zap.Int("already_erased", ans.AlreadyErased), zap.Int("not_found", ans.NotFound), zap.Int("queued", ans.Queued))
	writeJSON(w, http.StatusOK, ans)
}

// readErasureRequest decodes and checks the body of POST /v1/erasures.
// The error names what is wrong, and where.
func readErasureRequest(r io.Reader) (ErasureRequest, error) {
	var req ErasureRequest
	body, err := io.ReadAll(r)
	if err != nil {
		return req, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("the body is not an erasure request: %v; want {\"by\": NAME, \"reason\": TEXT, \"messages\": [{\"source\": S, \"id\": ID}, ...], \"dry_run\": false}", err)
	}
	if dec.More() {
		return req, errors.New("the body holds more than one JSON value; send one erasure request")
	}
	req.By = strings.TrimSpace(req.By)
	switch {
	case req.By == "":
		return req, errors.New(`"by" is required: who asks for the erasure, for the audit log`)
	case len(req.Messages) == 0:
		return req, errors.New(`"messages" names no message`)
	case len(req.Messages) > store.MaxErasureKeys:
		return req, fmt.Errorf(`"messages" names %d messages; at most %d in one request`, len(req.Messages), store.MaxErasureKeys)
	}
	for i, k := range req.Messages {
		if k.ExternalID == "" {
			return req, fmt.Errorf(`messages[%d] has no "id"`, i)
		}
	}
	return req, nil
}
