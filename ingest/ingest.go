// Package ingest reads customer messages (JSONL), checks each, records it in
// Postgres and publishes its run to the stream, so every message is either
// rejected with a reason, a duplicate of one already stored, or queued.
package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// DBRetryTime is how long ingest waits out an unreachable Postgres (a
// restart, a failover) on one line before it stops.
const DBRetryTime = 2 * time.Minute

// MaxLineBytes is the longest JSONL line read, in bytes. Longer lines are
// rejected; the text limit (Config.MaxTextBytes) is usually far lower.
const MaxLineBytes = 4 << 20

// Flags set on a stored message.
const (
	// FlagInvalidUTF8 marks a message whose line held invalid UTF-8; each
	// invalid byte sequence was replaced by U+FFFD before storing.
	FlagInvalidUTF8 = "invalid_utf8_replaced"
	// FlagLoneSurrogate marks a message whose text held a lone UTF-16
	// surrogate escape (such as \ud800); each was replaced by U+FFFD.
	FlagLoneSurrogate = "lone_surrogate_replaced"
)

// Config configures an Ingester.
type Config struct {
	Store     *store.Store
	Publisher *queue.Publisher
	// SchemaID is the schema every message of the batch is extracted with.
	SchemaID string
	// MaxTextBytes rejects longer texts. Required.
	MaxTextBytes int
	// BatchID names the batch; empty means a new generated id.
	BatchID string
	// SourceName is recorded on the batch (a file name, or "-" for stdin).
	SourceName string
	// Progress, if set, is called after each line with its number. With
	// Parallel above 1 it is called from several goroutines.
	Progress func(lines int)
	// Parallel is how many lines are recorded and published at once.
	// Default 1: one after the other.
	Parallel int
	Logger   *zap.Logger
}

// LineError is a rejected line: its 1-based number, the message id when
// it could be read, and why.
type LineError struct {
	Line   int    `json:"line"`
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason"`
}

func (e LineError) Error() string {
	if e.ID != "" {
		return fmt.Sprintf("line %d (id %q): %s", e.Line, e.ID, e.Reason)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// Summary is what one ingest did.
type Summary struct {
	BatchID string `json:"batch_id"`
	// Lines counts the non-blank lines read, over-long ones included, so
	// Lines = Published + Duplicates + Rejected when Run returns no error.
	Lines int `json:"lines"`
	// Published counts runs published by this ingest: new messages, and
	// stored messages whose run had never been published.
	Published int `json:"published"`
	// Duplicates counts messages already stored with the same text.
	Duplicates int `json:"duplicates"`
	// Rejected counts bad lines and conflicts (same id, other text).
	Rejected int `json:"rejected"`
	// Errors lists every rejected line.
	Errors []LineError `json:"errors,omitempty"`
	// Waiting lists the duplicates whose run (of an earlier batch) is still
	// queued, so a wait covers them too.
	Waiting []store.RunRef `json:"-"`
}

// Ingester records and publishes messages.
type Ingester struct {
	cfg        Config
	log        *zap.Logger
	progressMu sync.Mutex
}

// New returns an Ingester.
func New(cfg Config) (*Ingester, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.SchemaID == "" || cfg.MaxTextBytes <= 0 {
		return nil, errors.New("ingest: Store, Publisher, SchemaID and MaxTextBytes are required")
	}
	if cfg.BatchID == "" {
		cfg.BatchID = NewBatchID(time.Now())
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Ingester{cfg: cfg, log: log.Named("ingest")}, nil
}

// BatchID returns the batch this Ingester writes.
func (in *Ingester) BatchID() string { return in.cfg.BatchID }

// NewBatchID returns a new batch id: "b-" + UTC time to the second + 6
// random hex digits, so ids sort by time.
func NewBatchID(now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return "b-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// Input is one accepted line.
type Input struct {
	ID       string
	Source   string
	Text     string
	Metadata json.RawMessage
	Flags    []string
}

// ParseLine checks one JSONL line. A line is a JSON object with "id" (a
// non-empty string, or an integer, kept as its decimal text) and "text" (a
// string with at least one non-space character, at most maxText bytes, no
// NUL). "source" (a string) is optional; every other key is kept as
// metadata (keys sorted, compact; {} when none). Each run of invalid UTF-8
// bytes is replaced by one U+FFFD and FlagInvalidUTF8 is set. The error
// names what is wrong; for invalid JSON, the 1-based byte offset into line
// as given.
func ParseLine(line []byte, maxText int) (Input, error) {
	var in Input
	// Parsed as read first, so a syntax error's offset points into the
	// line itself, not into its repaired copy.
	var obj map[string]json.RawMessage
	err := json.Unmarshal(line, &obj)
	if err == nil && !utf8.Valid(line) {
		// Bad bytes can only be inside strings here; replacing them keeps
		// the line valid JSON.
		line = bytes.ToValidUTF8(line, []byte("\uFFFD"))
		in.Flags = append(in.Flags, FlagInvalidUTF8)
		obj = nil
		err = json.Unmarshal(line, &obj)
	}
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return in, fmt.Errorf("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return in, fmt.Errorf("not a JSON object: the line is a JSON %s", te.Value)
		}
		return in, fmt.Errorf("not a JSON object: %v", err)
	}
	if obj == nil { // the line is JSON null
		return in, errors.New("not a JSON object: null")
	}
	// A key given twice would be last-wins in encoding/json: refuse it, as
	// the reply parser does.
	if _, derr := pipeline.DecodeStrict(line); derr != nil {
		var dk *pipeline.DuplicateKeyError
		if errors.As(derr, &dk) {
			return in, fmt.Errorf("key %s occurs twice", dk.Path)
		}
	}
	rawID, ok := obj["id"]
	if !ok {
		return in, errors.New(`missing "id"`)
	}
	var sid string
	var nid json.Number
	switch {
	case isNull(rawID):
		return in, errors.New(`"id" must be a string or an integer`)
	case json.Unmarshal(rawID, &sid) == nil:
	case json.Unmarshal(rawID, &nid) == nil && isInteger(nid.String()):
		sid = nid.String()
	default:
		return in, errors.New(`"id" must be a string or an integer`)
	}
	if strings.TrimSpace(sid) == "" {
		return in, errors.New(`"id" is empty`)
	}
	if strings.ContainsRune(sid, 0) {
		return in, errors.New(`"id" contains a NUL character`)
	}
	in.ID = sid
	if rs, ok := obj["source"]; ok {
		if err := json.Unmarshal(rs, &in.Source); err != nil {
			return in, errors.New(`"source" must be a string`)
		}
		if strings.ContainsRune(in.Source, 0) {
			return in, errors.New(`"source" contains a NUL character`)
		}
	}
	rawText, ok := obj["text"]
	if ok && pipeline.HasLoneSurrogate(string(rawText)) {
		// encoding/json turns each into U+FFFD, as with invalid UTF-8.
		in.Flags = append(in.Flags, FlagLoneSurrogate)
	}
	if !ok {
		return in, errors.New(`missing "text"`)
	}
	if err := json.Unmarshal(rawText, &in.Text); err != nil || isNull(rawText) {
		return in, errors.New(`"text" must be a string`)
	}
	switch {
	case strings.TrimFunc(in.Text, unicode.IsSpace) == "":
		return in, errors.New(`"text" is empty or only white space`)
	case len(in.Text) > maxText:
		return in, fmt.Errorf(`"text" is %d bytes; the limit is %d`, len(in.Text), maxText)
	case strings.ContainsRune(in.Text, 0):
		return in, errors.New(`"text" contains a NUL character`)
	}
	delete(obj, "id")
	delete(obj, "text")
	delete(obj, "source")
	// Keys sorted, compact, and <, >, & kept as they are (not \u003c...).
	var mb bytes.Buffer
	enc := json.NewEncoder(&mb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return in, fmt.Errorf("metadata: %v", err)
	}
	meta := bytes.TrimSuffix(mb.Bytes(), []byte("\n"))
	if hasNULEscape(meta) {
		return in, errors.New("metadata contains a NUL character")
	}
	in.Metadata = meta
	return in, nil
}

// isNull reports whether raw is the JSON literal null, which json.Unmarshal
// accepts into a string as "no change".
func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// hasNULEscape reports whether the compact JSON doc holds the escape
// \u0000. An escaped backslash followed by "u0000" is text, not a NUL.
func hasNULEscape(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' {
			continue
		}
		if i+5 < len(doc) && doc[i+1] == 'u' && string(doc[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

func isInteger(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r >= '0' && r <= '9' || (i == 0 && r == '-')) {
			return false
		}
	}
	return true
}

// ContentHash is the SHA-256 of the text's bytes.
func ContentHash(text string) []byte {
	h := sha256.Sum256([]byte(text))
	return h[:]
}

// Run reads JSONL from r and ingests every line. Bad lines are rejected
// with their line number and the rest go on. It returns an error only when
// it cannot go on at all (the batch cannot be recorded, the reader fails,
// or ctx ends); the Summary then says how far it got.
func (in *Ingester) Run(ctx context.Context, r io.Reader) (Summary, error) {
	sum := Summary{BatchID: in.cfg.BatchID}
	st := in.cfg.Store
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: in.cfg.BatchID, SchemaID: in.cfg.SchemaID, SourceName: in.cfg.SourceName}); err != nil {
		return sum, fmt.Errorf("ingest: recording batch %s: %w", in.cfg.BatchID, err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type job struct {
		lineNo int
		line   []byte
	}
	n := max(1, in.cfg.Parallel)
	if n == 1 {
		// One after the other, in line order, on this goroutine.
		var fatal error
		readErr := in.read(ctx, r, &sum, func(lineNo int, line []byte) bool {
			if fatal = in.one(ctx, lineNo, line, &sum); fatal != nil {
				return false
			}
			in.progress(lineNo)
			return true
		})
		if fatal != nil {
			return sum, fatal
		}
		if readErr == nil && ctx.Err() != nil {
			return sum, ctx.Err()
		}
		return sum, readErr
	}
	jobs := make(chan job)
	parts := make([]Summary, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for j := range jobs {
				if err := in.one(ctx, j.lineNo, j.line, &parts[i]); err != nil {
					cancel(err)
				}
				in.progress(j.lineNo)
			}
		})
	}
	readErr := in.read(ctx, r, &sum, func(lineNo int, line []byte) bool {
		select {
		case jobs <- job{lineNo, line}:
			return true
		case <-ctx.Done():
			return false
		}
	})
	close(jobs)
	wg.Wait()
	for _, p := range parts {
		sum.Published += p.Published
		sum.Duplicates += p.Duplicates
		sum.Rejected += p.Rejected
		sum.Errors = append(sum.Errors, p.Errors...)
		sum.Waiting = append(sum.Waiting, p.Waiting...)
	}
	sort.SliceStable(sum.Errors, func(i, j int) bool { return sum.Errors[i].Line < sum.Errors[j].Line })
	if err := context.Cause(ctx); err != nil {
		return sum, err
	}
	return sum, readErr
}

// progress reports a line done, one call at a time.
func (in *Ingester) progress(lineNo int) {
	if in.cfg.Progress == nil {
		return
	}
	in.progressMu.Lock()
	defer in.progressMu.Unlock()
	in.cfg.Progress(lineNo)
}

// read splits r into lines, counts them in sum, rejects over-long ones,
// and hands every non-blank line to handle until it returns false.
func (in *Ingester) read(ctx context.Context, r io.Reader, sum *Summary, handle func(lineNo int, line []byte) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	lineNo := 0
	for {
		if ctx.Err() != nil {
			return nil // the cause is reported by Run
		}
		line, err := readLine(br)
		tooLong := errors.Is(err, errLineTooLong)
		if err != nil && err != io.EOF && !tooLong {
			return fmt.Errorf("ingest: reading line %d: %w", lineNo+1, err)
		}
		if len(line) > 0 || err == nil || tooLong {
			lineNo++
		}
		if tooLong {
			sum.Lines++
			sum.reject(LineError{Line: lineNo, Reason: fmt.Sprintf("line is longer than %d bytes", MaxLineBytes)})
			in.progress(lineNo)
			continue
		}
		if lineNo == 1 {
			// A UTF-8 byte order mark, as some editors write, is not data.
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(line)) > 0 {
			sum.Lines++
			if !handle(lineNo, bytes.Clone(line)) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its end, draining a line longer than
// MaxLineBytes and returning errLineTooLong for it.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > MaxLineBytes {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(buf, "\r\n"), err
	}
}

func (s *Summary) reject(e LineError) {
	s.Rejected++
	s.Errors = append(s.Errors, e)
}

// one ingests one line. It returns an error only for failures that stop
// the whole ingest (the database or the stream is gone).
func (in *Ingester) one(ctx context.Context, lineNo int, line []byte, sum *Summary) error {
	msg, err := ParseLine(line, in.cfg.MaxTextBytes)
	if err != nil {
		sum.reject(LineError{Line: lineNo, ID: msg.ID, Reason: err.Error()})
		return nil
	}
	st := in.cfg.Store
	// Postgres restarting is waited out (MessageIngest is idempotent). A
	// retry may find the message its own lost attempt stored.
	var res store.MessageIngestResult
	tries := 0
	err = store.Retry(ctx, DBRetryTime, func() error {
		tries++
		var err error
		res, err = st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{
			Source: msg.Source, ExternalID: msg.ID, Body: msg.Text, ContentHash: ContentHash(msg.Text),
			Metadata: msg.Metadata, Flags: msg.Flags, BatchID: in.cfg.BatchID, SchemaID: in.cfg.SchemaID,
		})
		return err
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		sum.reject(LineError{Line: lineNo, ID: msg.ID, Reason: "conflict: this id is already stored with a different text; the stored message is kept"})
		return nil
	case err != nil:
		return fmt.Errorf("ingest: line %d (id %q): %w", lineNo, msg.ID, err)
	}
	ownLostAttempt := tries > 1 && res.Run.BatchID == in.cfg.BatchID
	if res.Status == store.IngestDuplicate && (res.Run.PublishedAt != nil || (res.Run.BatchID == in.cfg.BatchID && !ownLostAttempt)) {
		// Published already, or recorded by this very batch (the same id
		// twice in one file), whose own line publishes it.
		sum.Duplicates++
		if res.Run.Status == store.RunQueued && res.Run.BatchID != in.cfg.BatchID {
			sum.Waiting = append(sum.Waiting, store.RunRef{MessageID: res.Run.MessageID, RunNo: res.Run.RunNo})
		}
		return nil
	}
	// New, or stored earlier but never published: publish now. The dedup
	// key keeps a publish that did land before from being stored twice.
	env := queue.Envelope{MessageID: res.Run.MessageID, RunNo: res.Run.RunNo, BatchID: res.Run.BatchID, SchemaID: res.Run.SchemaID}
	if err := in.publish(ctx, res.Run.DedupID, env); err != nil {
		return fmt.Errorf("ingest: publishing line %d (id %q): %w; the message is stored and queued, and the next ingest of this file publishes it", lineNo, msg.ID, err)
	}
	if err := store.Retry(ctx, DBRetryTime, func() error {
		return st.RunMarkPublished(ctx, st.Pool, store.RunMarkPublishedParams{MessageID: res.Run.MessageID, RunNo: res.Run.RunNo})
	}); err != nil {
		return fmt.Errorf("ingest: line %d (id %q): marking published: %w", lineNo, msg.ID, err)
	}
	if res.Status == store.IngestDuplicate {
		in.log.Info("published a stored run that had not been published", zap.Int64("message_id", res.Run.MessageID))
	}
	sum.Published++
	return nil
}

// publish publishes one run. While the stream is at its limits it waits
// (250ms, doubling to 5s) and tries again until ctx ends: back-pressure,
// never a dropped message.
func (in *Ingester) publish(ctx context.Context, dedupID string, env queue.Envelope) error {
	wait := 250 * time.Millisecond
	warned := false
	for {
		_, err := in.cfg.Publisher.Publish(ctx, dedupID, env)
		if err == nil || !queue.IsStreamFull(err) {
			return err
		}
		if !warned {
			in.log.Warn("stream is full; waiting for workers to drain it", zap.Int64("message_id", env.MessageID))
			warned = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream full and %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
