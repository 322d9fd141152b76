package ingestapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/internal/words"
	"github.com/extractq/extractq/store"
)

// messagesParams are the query parameters POST /v1/messages takes.
var messagesParams = []string{"schema", "batch", "name"}

// requestLog is what the one log line of a POST says, besides the
// status and code of its answer.
type requestLog struct {
	// route is the route logged; "" is POST /v1/messages.
	route string
	// webhook is the webhook's name, on its route.
	webhook  string
	err      error
	bytes    int
	format   ingest.Format
	schema   string
	sum      *ingest.Summary
	canceled bool
}

// messages is POST /v1/messages. It logs one line (logRequest) before it
// returns.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) (err error) {
	start := time.Now()
	var rl requestLog
	// Logged before the answer is written, so before it leaves (gated)
	// and before Serve returns.
	defer func() { s.logRequest(r, start, rl, err) }()
	if err := s.authorize(w, r, "POST /v1/messages"); err != nil {
		return err
	}
	q, err := checkQuery(r.URL.RawQuery, "POST /v1/messages", messagesParams)
	if err != nil {
		return httperr.New(httperr.Invalid, err.Error())
	}
	schema := q.Get("schema")
	if schema == "" {
		schema = s.cfg.Schemas[0]
	} else if !slices.Contains(s.cfg.Schemas, schema) {
		return httperr.Errorf(httperr.Invalid, "schema %q is not configured; the configured schemas are %s", schema, strings.Join(s.cfg.Schemas, ", "))
	}
	rl.schema = schema
	format, isJSON, err := bodyFormat(r.Header)
	if err != nil {
		return httperr.New(httperr.UnsupportedMediaType, err.Error())
	}
	rl.format = format
	if isJSON {
		rl.format = "json" // read as JSONL once turned into lines; logged as sent
	}
	ctx, body, release, err := s.admit(w, r, &rl, admission{
		limit:    s.cfg.MaxBodyBytes,
		tooLarge: func(n int64) string { return tooLarge(n, s.cfg.MaxBodyBytes) },
		again:    "post the body again later",
	})
	if err != nil {
		return err
	}
	defer release()
	if len(body) == 0 {
		return httperr.New(httperr.Invalid, "the body is empty; send messages as JSONL, CSV or JSON")
	}
	// Refused whole, before it is read as lines: a compressed body sent
	// without Content-Encoding, an archive, UTF-16, binary data.
	if ue := ingest.Sniff(body[:min(len(body), ingest.SniffBytes)], format); ue != nil {
		if isJSON {
			ue.Format = ingest.FormatJSON
		}
		return unreadableBody(ue)
	}
	input := body
	switch {
	case isJSON:
		lines, err := jsonToLines(body)
		if err != nil {
			return httperr.New(httperr.Invalid, err.Error())
		}
		input = lines
	case format == ingest.FormatCSV:
		// The header is checked here, so a bad one is told apart from a
		// failure to record the batch.
		if err := ingest.CheckCSVHeader(bytes.NewReader(body)); err != nil {
			if ee, ok := errors.AsType[*ingest.EmptyInputError](err); ok {
				return noMessages(ee)
			}
			msg := err.Error()
			if first := bytes.TrimLeft(body, "\xef\xbb\xbf \t\r\n"); len(first) > 0 && first[0] == '{' {
				msg += "; the body looks like JSONL: send it with Content-Type: " + ContentTypeNDJSON
			}
			return httperr.New(httperr.Invalid, msg)
		}
	}

	ing, err := ingest.New(ingest.Config{
		Store: s.cfg.Store, Publisher: s.cfg.Publisher, SchemaID: schema, MaxTextBytes: s.cfg.MaxTextBytes,
		BatchID: q.Get("batch"), SourceName: sourceName(r, q.Get("name")), Format: format,
		Parallel: s.cfg.Parallel, MaxErrors: s.cfg.MaxErrors, NATSRetryTime: s.cfg.NATSRetryTime, Logger: s.log,
	})
	if err != nil {
		rl.err = err
		return httperr.Internalf(err)
	}
	sum, runErr := ing.Run(ctx, bytes.NewReader(input))
	rl.sum, rl.err = &sum, runErr
	rl.canceled = r.Context().Err() != nil
	if runErr != nil {
		return s.runFailed(ctx, w, r, sum, runErr)
	}

	rep := ingest.NewReport(sum)
	nothing := sum.Lines > 0 && sum.Rejected == sum.Lines
	if nothing && !isJSON && sum.CSVReadAsJSONL() {
		rep.Hint = "the body looks like CSV: send it with Content-Type: " + ContentTypeCSV
	}
	octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ocancel()
	if err := ingest.AddOutcomes(octx, s.cfg.Store, sum, &rep); err != nil {
		rl.err = fmt.Errorf("reading batch %s: %w", sum.BatchID, err)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		return &httperr.Error{Code: httperr.Unavailable, Beside: &rep,
			Message: "the body was ingested (the counts are in this answer) but the batch's outcomes could not be read " +
				"(queued and the rest read 0); posting it again without a batch id is safe: its messages are duplicates"}
	}
	if nothing {
		return &httperr.Error{Code: httperr.Unprocessable, Beside: &rep,
			Message: fmt.Sprintf("%s rejected (see errors); nothing was queued%s", words.AllLinesWere(sum.Lines), words.Optional("; %s", rep.Hint))}
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// noMessages is the error of a body that holds no messages (ee).
func noMessages(ee *ingest.EmptyInputError) error {
	return httperr.Errorf(httperr.Invalid, "the body holds no messages (%s); no batch was recorded", ee.Reason)
}

// runFailed returns the error of a Run that returned err.
func (s *Server) runFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, sum ingest.Summary, err error) error {
	_, started := errors.AsType[*ingest.StartError](err)
	if ee, ok := errors.AsType[*ingest.EmptyInputError](err); ok {
		return noMessages(ee)
	}
	if ue, ok := errors.AsType[*ingest.UnreadableInputError](err); ok {
		return unreadableBody(ue)
	}
	if started && errors.Is(err, store.ErrConflict) {
		return httperr.Errorf(httperr.Conflict, "batch %q already exists; a batch id is used once: leave out batch for a new one", sum.BatchID)
	}
	why := "Postgres or NATS failed"
	ne, natsFailed := errors.AsType[*ingest.NATSError](err)
	switch {
	case s.stop.Err() != nil:
		why = "the server is shutting down"
	case natsFailed:
		why = ne.Explanation
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		why = fmt.Sprintf("the request took longer than %v (is the stream full, or Postgres slow?)", s.cfg.RequestTimeout)
	case r.Context().Err() != nil:
		why = "the client went away"
	}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	if started {
		return httperr.New(httperr.Unavailable, why+"; nothing was stored: post the body again later")
	}
	rep := ingest.NewReport(sum)
	// Where the batch stands, if Postgres answers at once: what it
	// stored is queued (or done), published or not.
	octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = ingest.AddOutcomes(octx, s.cfg.Store, sum, &rep)
	ocancel()
	return &httperr.Error{Code: httperr.Unavailable, Beside: &rep, Message: fmt.Sprintf("%s; batch %s stopped after %s: the report counts what was done. "+
		"A message stored but not yet published is queued all the same (the worker's sweeper publishes it). "+
		"Post the same body again, without a batch id, to go on: the messages stored already count as duplicates",
		why, sum.BatchID, words.Plural(sum.Lines, "line", "lines"))}
}

// logRequest logs one POST, never a message's text or the token, and
// counts its lines.
func (s *Server) logRequest(r *http.Request, start time.Time, rl requestLog, answer error) {
	s.metrics.addLines(rl.sum)
	status, code := http.StatusOK, ""
	if answer != nil {
		status, code = http.StatusInternalServerError, string(httperr.Internal)
		if e, ok := httperr.As(answer); ok {
			status, code = e.Status(), string(e.Code)
		}
	}
	fields := []zap.Field{
		zap.Int("status", status), zap.Duration("duration", time.Since(start)),
		zap.String("remote", r.RemoteAddr), zap.Int("body_bytes", rl.bytes),
	}
	if code != "" {
		fields = append(fields, zap.String("code", code))
	}
	if rl.format != "" {
		fields = append(fields, zap.String("format", string(rl.format)), zap.String("schema", rl.schema))
	}
	if rl.sum != nil {
		fields = append(fields, zap.String("batch_id", rl.sum.BatchID), zap.Int("lines", rl.sum.Lines),
			zap.Int("published", rl.sum.Published), zap.Int("duplicates", rl.sum.Duplicates), zap.Int("rejected", rl.sum.Rejected))
	}
	if rl.webhook != "" {
		fields = append(fields, zap.String("webhook", rl.webhook))
	}
	if rl.err != nil {
		fields = append(fields, zap.Error(rl.err))
	}
	if rl.canceled {
		fields = append(fields, zap.Bool("client_gone", true))
	}
	route := cmp.Or(rl.route, "POST /v1/messages")
	if status >= 500 {
		s.log.Warn(route, fields...)
		return
	}
	s.log.Info(route, fields...)
}

// gated counts h's requests in flight (enter, leave), so Serve returns
// once they have answered; once the server stops, it answers 503 itself.
func (s *Server) gated(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			err := httperr.New(httperr.Unavailable, "the server is shutting down")
			s.logRequest(r, time.Now(), requestLog{route: route}, err)
			s.serveError(w, r, err)
			return
		}
		defer s.leave()
		h.ServeHTTP(w, r)
	})
}

// sourceName is the batch's source name: "http:" and the client's name
// (parameter name) or, without one, its IP address.
func sourceName(r *http.Request, name string) string {
	if name != "" {
		return "http:" + name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "http:" + host
}

// jsonToLines turns an application/json body, one JSON object or an array
// of values, into JSONL: each value compact on its own line, so the array's
// n-th element (from 1) is line n. Each value is then checked as a JSONL
// line is (a value that is not an object is rejected there). A body that is
// not JSON, or is neither an object nor an array, is an error naming the
// byte (from 1) where it goes wrong.
func jsonToLines(body []byte) ([]byte, error) {
	off := 0
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) {
		off = 3
	}
	trimmed := bytes.TrimLeft(body[off:], " \t\r\n")
	if len(trimmed) == 0 {
		// Blank: Run reports it as an input without messages.
		return body, nil
	}
	var values []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body[off:]))
	var err error
	switch trimmed[0] {
	case '{':
		var v json.RawMessage
		if err = dec.Decode(&v); err == nil {
			values = []json.RawMessage{v}
		}
	case '[':
		err = dec.Decode(&values)
		if err == nil && len(values) == 0 {
			return nil, errors.New("the body is an empty JSON array: it holds no messages")
		}
	default:
		return nil, fmt.Errorf("an %s body is one JSON object or an array of objects; this one starts with %q", ContentTypeJSON, trimmed[0])
	}
	if err == nil {
		end := off + int(dec.InputOffset())
		if rest := bytes.TrimLeft(body[end:], " \t\r\n"); len(rest) > 0 {
			return nil, fmt.Errorf("invalid JSON at byte %d: more after the first JSON value; send one object or an array, or JSONL with Content-Type: %s",
				len(body)-len(rest)+1, ContentTypeNDJSON)
		}
	}
	if err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			return nil, fmt.Errorf("invalid JSON at byte %d: %s", int(se.Offset)+off, strings.TrimPrefix(se.Error(), "json: "))
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// As a JSONL line cut off says (encoding/json's message, at
			// the body's last byte).
			return nil, fmt.Errorf("invalid JSON at byte %d: unexpected end of JSON input (the body ends before its JSON value does)",
				len(bytes.TrimRight(body, " \t\r\n")))
		}
		return nil, fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	var out bytes.Buffer
	out.Grow(len(body))
	for _, v := range values {
		// Compact keeps strings byte for byte, so ParseLine sees what was
		// sent: invalid UTF-8, keys given twice.
		if err := json.Compact(&out, v); err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		out.WriteByte('\n')
	}
	return out.Bytes(), nil
}

// unreadableBody is the error of a POST whose body is ue, saying how to
// send it as text: compressed_body for a compressed format or an
// archive, not_text for UTF-16 and binary data.
func unreadableBody(ue *ingest.UnreadableInputError) error {
	msg := "the body " + ue.Describe() + "; no batch was recorded"
	switch ue.Kind {
	case ingest.KindBinary:
		return httperr.New(httperr.NotText, msg)
	case ingest.KindUTF16:
		return httperr.New(httperr.NotText, msg+": convert it to UTF-8 before sending it ("+ue.Unpack("FILE")+" | curl --data-binary @- ...)")
	case ingest.KindZip, ingest.KindTar:
		return httperr.New(httperr.CompressedBody, msg+": send the file inside it ("+ue.Unpack("FILE")+" | curl --data-binary @- ...)")
	}
	return httperr.New(httperr.CompressedBody, msg+": send it uncompressed ("+ue.Unpack("FILE")+" | curl --data-binary @- ...); Content-Encoding is not supported either")
}
