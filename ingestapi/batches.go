package ingestapi

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/extractq/extractq/internal/httperr"
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
func (s *Server) batch(w http.ResponseWriter, r *http.Request) error {
	q, err := s.readRequest(w, r, "GET /v1/batches/{id}", batchParams)
	if err != nil {
		return err
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		var err error
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > maxBatchWait {
			return httperr.Errorf(httperr.Invalid, "wait %q: want a duration such as 30s, at most %v", v, maxBatchWait)
		}
	}
	id, ctx := r.PathValue("id"), r.Context()
	deadline, poll := time.Now().Add(wait), 250*time.Millisecond
	for {
		bs, err := s.readBatch(w, r, id)
		if err != nil {
			return err
		}
		left := time.Until(deadline)
		if bs.Done() || left <= 0 || s.draining.Load() || s.stop.Err() != nil {
			writeJSON(w, http.StatusOK, batchStatus{BatchSummary: bs, Done: bs.Done()})
			return nil
		}
		select {
		case <-ctx.Done():
			return errClientGone
		case <-s.stop.Done():
		case <-time.After(min(poll, left)):
		}
		poll = min(2*poll, 2*time.Second)
	}
}

// readBatch reads where batch id stands. The error is not_found for an
// unknown batch, unavailable when Postgres fails, and errClientGone when
// the client went away.
func (s *Server) readBatch(w http.ResponseWriter, r *http.Request, id string) (store.BatchSummary, error) {
	if !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		// No batch id holds such bytes, and Postgres would refuse them.
		return store.BatchSummary{}, httperr.Errorf(httperr.NotFound, "there is no batch %q: a batch id is UTF-8 text without NUL", id)
	}
	bs, err := s.cfg.Store.BatchSummary(r.Context(), s.cfg.Store.Pool, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return bs, httperr.Errorf(httperr.NotFound, "there is no batch %q", id)
	case err != nil && r.Context().Err() != nil:
		return bs, errClientGone
	case err != nil:
		s.log.Warn("reading a batch", zap.String("batch_id", id), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		return bs, &httperr.Error{Code: httperr.Unavailable, Message: "the batch cannot be read now (is Postgres down?)", Err: err}
	}
	return bs, nil
}
