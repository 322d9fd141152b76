package ingestapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/store"
)

// resultsParams are the query parameters GET /v1/batches/{id}/results
// takes.
var resultsParams = []string{"after", "format"}

// results is GET /v1/batches/{id}/results: one JSON line per message of
// the batch (store.BatchResult: its run's status, its triage item's, and
// its current result or null), by message id, read from Postgres a page
// at a time; with format=csv, the same rows as CSV (package export: a
// header, the record's fields as columns named from the schema). after=ID
// starts past message ID, to resume a download that was cut. An unknown
// batch is 404. If Postgres fails part way, the last JSON line is
// {"error": {...}} naming the after= to resume with; a CSV has no room
// for it, so its response is cut short instead (no final chunk), and the
// client resumes after its last complete row's _message_id.
func (s *Server) results(w http.ResponseWriter, r *http.Request) error {
	q, err := s.readRequest(w, r, "GET /v1/batches/{id}/results", resultsParams)
	if err != nil {
		return err
	}
	var after int64
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return httperr.Errorf(httperr.Invalid, "after %q: want a message id (an integer, 0 or more)", v)
		}
	}
	format, err := export.ParseFormat(q.Get("format"))
	if err != nil {
		return httperr.Errorf(httperr.Invalid, "%v", err)
	}
	id, ctx, st := r.PathValue("id"), r.Context(), s.cfg.Store
	if _, err := s.readBatch(w, r, id); err != nil {
		return err
	}
	var cols []export.Column
	if format == export.FormatCSV {
		schemaID, err := st.BatchSchemaID(ctx, st.Pool, id)
		if err != nil {
			return &httperr.Error{Code: httperr.Unavailable, Message: "the batch cannot be read now (is Postgres down?)", Err: err}
		}
		var ok bool
		if cols, ok = s.cfg.ResultColumns[schemaID]; !ok {
			return httperr.Errorf(httperr.Unprocessable, "batch %q is of schema %q, which this server's configuration lacks: its CSV columns are unknown; ask for format=jsonl", id, schemaID)
		}
	}
	w.Header().Set("Content-Type", export.ContentType(format))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ew := export.NewWriter(w, format, cols)
	rc := http.NewResponseController(w)
	n, last := 0, after
	errGone := errors.New("the client went away")
	err = st.BatchResultPages(ctx, st.Pool, store.BatchResultListParams{BatchID: id, After: after, Limit: s.cfg.ResultsPage},
		func(page []store.BatchResult) error {
			for _, row := range page {
				if err := ew.Write(row); err != nil {
					return errGone
				}
			}
			n, last = n+len(page), page[len(page)-1].MessageID
			if err := ew.Flush(); err != nil {
				return errGone
			}
			_ = rc.Flush()
			return nil
		})
	if err == nil {
		err = ew.Flush() // an empty batch's CSV header
	}
	switch {
	case err == nil:
		s.log.Debug("results sent", zap.String("batch_id", id), zap.Int("messages", n))
	case errors.Is(err, errGone) || ctx.Err() != nil:
	default:
		// The status (200) is sent: the error is the stream's last line.
		s.log.Warn("reading a batch's results", zap.String("batch_id", id), zap.Int("written", n), zap.Error(err))
		if format == export.FormatCSV {
			panic(http.ErrAbortHandler) // cut short: the client sees an incomplete body
		}
		_ = json.NewEncoder(w).Encode(httperr.Errorf(httperr.Unavailable,
			"the results could not be read past message %d (is Postgres down?): ask again with after=%d", last, last))
	}
	return nil
}
