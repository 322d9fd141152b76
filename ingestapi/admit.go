package ingestapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/internal/words"
)

// admission says how admit reads one route's body and words its
// refusals.
type admission struct {
	// limit is the largest body taken, in bytes.
	limit int64
	// tooLarge words a body past limit: n is its Content-Length, or -1
	// when it was found longer while read.
	tooLarge func(n int64) string
	// again tells the client what to do after a 503: "post the body
	// again later".
	again string
}

// admit lets a POST in and reads its body, in the order every POST that
// carries messages checks them: its Content-Length against a.limit (413);
// one of MaxRequests, waiting up to BusyWait (429, Retry-After 1); the
// store and NATS ready (503, Retry-After retryAfter); then the body, at
// most a.limit bytes (413), counted in reading while read. ctx is r's,
// bounded by RequestTimeout and canceled when the server stops; release
// cancels it and frees the place, and is nil when err is not. A refusal is
// an *httperr.Error; what the log line needs (the ping's or the read's
// error, the bytes read) is set in rl.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, rl *requestLog, a admission) (ctx context.Context, body []byte, release func(), err error) {
	if r.ContentLength > a.limit {
		return nil, nil, nil, httperr.New(httperr.TooLarge, a.tooLarge(r.ContentLength))
	}
	// Bodies are held in memory: at most MaxRequests of them.
	if !s.acquire(r.Context()) {
		w.Header().Set("Retry-After", "1")
		return nil, nil, nil, httperr.Errorf(httperr.TooManyRequests, "the server handles %s at once (-max-requests) and all are taken; try again shortly",
			words.Plural(s.cfg.MaxRequests, "request", "requests"))
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	stopCancel := context.AfterFunc(s.stop, cancel)
	free := func() {
		stopCancel()
		cancel()
		<-s.sem
	}
	defer func() {
		if err != nil {
			free()
		}
	}()

	// Unreachable before the body is read, so nothing of it is started.
	if why, err := s.ready(ctx); why != "" {
		rl.err = err
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		return nil, nil, nil, httperr.New(httperr.Unavailable, why+"; nothing was stored: "+a.again)
	}
	s.reading.Add(1)
	body, err = readAll(w, r, a.limit)
	s.reading.Add(-1)
	rl.bytes = len(body)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, nil, nil, httperr.New(httperr.TooLarge, a.tooLarge(-1))
	}
	if err != nil {
		rl.err, rl.canceled = err, r.Context().Err() != nil
		if s.stop.Err() != nil {
			return nil, nil, nil, httperr.New(httperr.Unavailable, "the server is shutting down; nothing was stored: "+a.again)
		}
		return nil, nil, nil, httperr.Errorf(httperr.Invalid, "reading the body: %v", err)
	}
	return ctx, body, free, nil
}

// acquire takes one of MaxRequests, waiting up to BusyWait; false when
// none came free (or the client went away).
func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.cfg.BusyWait)
	defer t.Stop()
	select {
	case s.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// readAll reads the whole body, at most limit bytes (a
// *http.MaxBytesError past that).
func readAll(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(rd)
	return buf.Bytes(), err
}
