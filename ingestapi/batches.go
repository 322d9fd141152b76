package ingestapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/extractq/extractq/store"
)

// batchParams are the query parameters GET /v1/batches/{id} takes.
var batchParams = []string{"wait"}

// maxBatchWait is the longest wait GET /v1/batches/{id}?wait= takes.
const maxBatchWait = time.Minute

// batchStatus is the answer of GET /v1/batches/{id}: the batch's counts,
// calls and cost (store.BatchSummary), and whether it is done.
type batchStatus struct {
	store.BatchSummary
	Done bool `json:"done"`
}

// batch is GET /v1/batches/{id}: where the batch stands. With wait=D (a
// Go duration up to maxBatchWait) it answers once the batch is done or D
// has passed, whichever comes first, and done says which; polling
// Postgres from every 250ms up to every 2s. An unknown batch is 404, a
// bad wait 400, and Postgres unreachable 503.
func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	q, ok := s.readRequest(w, r, "GET /v1/batches/{id}", batchParams)
	if !ok {
		return
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		var err error
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > maxBatchWait {
			writeError(w, http.StatusBadRequest, "bad_parameter", fmt.Sprintf("wait %q: want a duration such as 30s, at most %v", v, maxBatchWait))
			return
		}
	}
	id, ctx := r.PathValue("id"), r.Context()
	deadline, poll := time.Now().Add(wait), 250*time.Millisecond
	for {
		bs, ok := s.readBatch(w, r, id)
		if !ok {
			return
		}
		left := time.Until(deadline)
		if bs.Done() || left <= 0 || s.draining.Load() || s.stop.Err() != nil {
			writeJSON(w, http.StatusOK, batchStatus{BatchSummary: bs, Done: bs.Done()})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stop.Done():
		case <-time.After(min(poll, left)):
		}
		poll = min(2*poll, 2*time.Second)
	}
}

// readBatch reads where batch id stands. It answers 404 for an unknown
// batch and 503 when Postgres fails (nothing when the client went away),
// and returns false then.
func (s *Server) readBatch(w http.ResponseWriter, r *http.Request, id string) (store.BatchSummary, bool) {
	if !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		// No batch id holds such bytes, and Postgres would refuse them.
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("there is no batch %q: a batch id is UTF-8 text without NUL", id))
		return store.BatchSummary{}, false
	}
	bs, err := s.cfg.Store.BatchSummary(r.Context(), s.cfg.Store.Pool, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("there is no batch %q", id))
	case err != nil && r.Context().Err() != nil:
		// the client went away
	case err != nil:
		s.log.Warn("reading a batch", zap.String("batch_id", id), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the batch cannot be read now (is Postgres down?)")
	default:
		return bs, true
	}
	return bs, false
}
