// Package ingest reads customer messages (JSONL or CSV), checks each,
// records it in Postgres and publishes its run to the stream, so every
// message is either rejected with a reason, a duplicate of one already
// stored, or queued.
package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
)

// DBRetryTime is how long ingest waits out an unreachable Postgres (a
// restart, a failover) on one line before it stops.
const DBRetryTime = 2 * time.Minute

// MaxLineBytes is the longest JSONL line or CSV record read, in bytes,
// line ends included. Longer ones are read past without being kept, and
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
	// Relay, if set, publishes the runs (it must use Store and
	// Publisher); default a relay of Store and Publisher.
	Relay *relay.Relay
	// SchemaID is the schema every message of the batch is extracted with.
	SchemaID string
	// MaxTextBytes rejects longer texts. Required.
	MaxTextBytes int
	// BatchID names the batch; empty means a new generated id.
	BatchID string
	// SourceName is recorded on the batch (a file name, or "-" for stdin).
	SourceName string
	// Format is the input's format: FormatJSONL (the default when empty)
	// or FormatCSV.
	Format Format
	// Progress, if set, is called after each line (CSV: each record) with
	// its number (CSV: the record's first line). With
	// Parallel above 1 it is called from several goroutines.
	Progress func(lines int)
	// Parallel is how many lines are recorded and published at once.
	// Default 1: one after the other.
	Parallel int
	// NATSRetryTime is how long one line's publish waits out a NATS that
	// does not take it (not connected, no responders, no answer, out of
	// storage, the stream full with nothing draining it) before the
	// ingest stops with what NATS answered (queue.Explain). Default
	// DBRetryTime, as long as Postgres is waited for (configuration key
	// nats.retry_time).
	NATSRetryTime time.Duration
	// MaxErrors is how many rejected lines Summary.Errors keeps, with
	// their reasons; the rest are only counted (Summary.ErrorsOmitted), so
	// a file of bad lines takes bounded memory. Default DefaultMaxErrors.
	MaxErrors int
	// OnReject, if set, is called with each rejected line that Errors
	// keeps, as it is rejected (so the first MaxErrors, in the order they
	// came: line order when Parallel is 1), one call at a time.
	OnReject func(LineError)
	Logger   *zap.Logger
}

// DefaultMaxErrors is Config.MaxErrors's default (configuration key
// ingest.max_errors).
const DefaultMaxErrors = 1000

// LineError is a rejected line: its 1-based number (for CSV, the first
// line of the record), the message id when it could be read, and why.
type LineError struct {
	Line int `json:"line"`
	// EndLine is the last line of a CSV record rejected as not valid CSV
	// or too long, when it spans lines (else 0): a quote left open takes
	// the lines after it into its record.
	EndLine int    `json:"end_line,omitempty"`
	ID      string `json:"id,omitempty"`
	Reason  string `json:"reason"`
}

func (e LineError) Error() string {
	lines := fmt.Sprintf("line %d", e.Line)
	if e.EndLine > e.Line {
		lines = fmt.Sprintf("lines %d-%d", e.Line, e.EndLine)
	}
	if e.ID != "" {
		return fmt.Sprintf("%s (id %q): %s", lines, e.ID, e.Reason)
	}
	return fmt.Sprintf("%s: %s", lines, e.Reason)
}

// Summary is what one ingest did.
type Summary struct {
	// BatchID is the batch recorded; "" when none was kept: nothing new
	// got into it (every line rejected or a duplicate, or the ingest
	// stopped before its first message was stored).
	BatchID string `json:"batch_id"`
	// Lines counts the non-blank JSONL lines read, over-long ones included,
	// or the CSV records (the header not counted), so
	// Lines = Published + Duplicates + Rejected when Run returns no error.
	Lines int `json:"lines"`
	// Published counts runs published by this ingest: new messages,
	// stored messages not yet extracted with this batch's schema (a new
	// run), and stored messages whose run had never been published.
	Published int `json:"published"`
	// Duplicates counts messages already stored with the same text and
	// already extracted (or queued) with this batch's schema.
	Duplicates int `json:"duplicates"`
	// Rejected counts bad lines and conflicts (same id, other text).
	Rejected int `json:"rejected"`
	// Errors lists the first Config.MaxErrors rejected lines (in the order
	// they were rejected), sorted by line.
	Errors []LineError `json:"errors,omitempty"`
	// ErrorsOmitted counts the rejected lines past those: Rejected =
	// len(Errors) + ErrorsOmitted.
	ErrorsOmitted int `json:"errors_omitted,omitempty"`
	// Waiting lists the duplicates whose run (of an earlier batch) is still
	// queued, so a wait covers them too.
	Waiting []store.RunRef `json:"-"`
	// DuplicateAnomalies counts runs the stream answered "duplicate" for
	// while it held another message under their dedup id: never expected
	// with random dedup ids (see package relay). Each was published again
	// under a fresh key, so it is counted in Published too.
	DuplicateAnomalies int `json:"duplicate_anomalies,omitempty"`
	// InvalidUTF8 counts the messages accepted (published or duplicates)
	// whose line or record held bytes that are not UTF-8, stored with
	// U+FFFD in their place (FlagInvalidUTF8): a file in Latin-1, say.
	InvalidUTF8 int `json:"invalid_utf8,omitempty"`
	// InvalidUTF8Lines are the line numbers of the first of them (at most
	// MaxInvalidUTF8Lines), ascending.
	InvalidUTF8Lines []int `json:"invalid_utf8_lines,omitempty"`
	// LooksLikeCSV reports that the first line of JSONL input reads as a
	// CSV header with "id" and "text" columns: CSV given as JSONL.
	LooksLikeCSV bool `json:"-"`

	// rej keeps the rejections of every part of one Run; nil once Run
	// has returned.
	rej *rejections
}

// rejections keeps the first max rejected lines of a Run and counts the
// rest, for every goroutine of the Run.
type rejections struct {
	mu       sync.Mutex
	max      int
	kept     []LineError
	omitted  int
	onReject func(LineError)
}

// add keeps e, or counts it when max are kept.
func (r *rejections) add(e LineError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.kept) >= r.max {
		r.omitted++
		return
	}
	r.kept = append(r.kept, e)
	if r.onReject != nil {
		r.onReject(e)
	}
}

// MaxInvalidUTF8Lines is how many line numbers Summary.InvalidUTF8Lines
// keeps.
const MaxInvalidUTF8Lines = 5

// add adds what p, a part of the same ingest, counted.
func (s *Summary) add(p Summary) {
	s.Published += p.Published
	s.Duplicates += p.Duplicates
	s.Rejected += p.Rejected
	s.DuplicateAnomalies += p.DuplicateAnomalies
	s.Waiting = append(s.Waiting, p.Waiting...)
	s.InvalidUTF8 += p.InvalidUTF8
	if len(p.InvalidUTF8Lines) > 0 {
		s.InvalidUTF8Lines = append(s.InvalidUTF8Lines, p.InvalidUTF8Lines...)
		slices.Sort(s.InvalidUTF8Lines)
		s.InvalidUTF8Lines = s.InvalidUTF8Lines[:min(len(s.InvalidUTF8Lines), MaxInvalidUTF8Lines)]
	}
}

// Ingester records and publishes messages.
type Ingester struct {
	cfg        Config
	log        *zap.Logger
	progressMu sync.Mutex
}

// New returns an Ingester. It fails when a required field is missing or
// Format is unknown.
func New(cfg Config) (*Ingester, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.SchemaID == "" || cfg.MaxTextBytes <= 0 {
		return nil, errors.New("ingest: Store, Publisher, SchemaID and MaxTextBytes are required")
	}
	switch cfg.Format {
	case "":
		cfg.Format = FormatJSONL
	case FormatJSONL, FormatCSV:
	default:
		return nil, fmt.Errorf("ingest: unknown format %q (want %s or %s)", cfg.Format, FormatJSONL, FormatCSV)
	}
	if cfg.BatchID == "" {
		cfg.BatchID = NewBatchID(time.Now())
	}
	if cfg.NATSRetryTime <= 0 {
		cfg.NATSRetryTime = DBRetryTime
	}
	if cfg.MaxErrors <= 0 {
		cfg.MaxErrors = DefaultMaxErrors
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Relay == nil {
		r, err := relay.New(relay.Config{Store: cfg.Store, Publisher: cfg.Publisher, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		cfg.Relay = r
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

// Input is one accepted line or record.
type Input struct {
	ID       string
	Source   string
	Text     string
	Metadata json.RawMessage
	Flags    []string
}

// ParseLine checks one JSONL line. A line is a JSON object with "id" (a
// non-empty string without control characters or white space at its
// start or end, or an integer, kept as its decimal text) and "text" (a
// string with at least one non-space character, at most maxText bytes, no
// NUL). Keys are case-sensitive: a line with "ID" but no "id" is missing
// "id", and the error names "ID". "source" (a string) is optional; every
// other key is kept as metadata (keys sorted, compact; {} when none), but
// for a number Postgres jsonb cannot hold (1e1000000), refused with its
// path. An id or source that is not valid UTF-8, or holds a lone UTF-16
// surrogate escape, is refused before anything else is checked: ids are
// kept byte for byte. Elsewhere, each run of invalid UTF-8 bytes is
// replaced by one U+FFFD and FlagInvalidUTF8 is set. The error names what
// is wrong; for invalid JSON, the 1-based byte offset into line as given.
func ParseLine(line []byte, maxText int) (Input, error) {
	var in Input
	// Parsed as read first, so a syntax error's offset points into the
	// line itself, not into its repaired copy.
	var obj map[string]json.RawMessage
	err := json.Unmarshal(line, &obj)
	if err == nil {
		// The key first, as read: invalid UTF-8 in it is refused, not
		// replaced with the rest of the line's.
		for _, k := range []string{"id", "source"} {
			if raw, ok := obj[k]; ok && len(raw) > 0 && raw[0] == '"' {
				if kerr := checkKeyRaw(k, raw, true); kerr != nil {
					return in, kerr
				}
			}
		}
	}
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
		return in, missingKey(obj, "id")
	}
	var sid string
	var nid json.Number
	switch {
	case isNull(rawID):
		return in, errors.New(`"id" must be a string or an integer`)
	case json.Unmarshal(rawID, &sid) == nil:
	case json.Unmarshal(rawID, &nid) == nil && IsIntegerID(nid.String()):
		sid = nid.String()
	default:
		return in, errors.New(`"id" must be a string or an integer`)
	}
	if err := in.setID(sid); err != nil {
		return in, err
	}
	if rs, ok := obj["source"]; ok {
		var source string
		if err := json.Unmarshal(rs, &source); err != nil {
			return in, errors.New(`"source" must be a string`)
		}
		if err := in.setSource(source); err != nil {
			return in, err
		}
	}
	rawText, ok := obj["text"]
	if ok && pipeline.HasLoneSurrogate(string(rawText)) {
		// encoding/json turns each into U+FFFD, as with invalid UTF-8.
		in.Flags = append(in.Flags, FlagLoneSurrogate)
	}
	if !ok {
		return in, missingKey(obj, "text")
	}
	var text string
	if err := json.Unmarshal(rawText, &text); err != nil || isNull(rawText) {
		return in, errors.New(`"text" must be a string`)
	}
	if err := in.setText(text, maxText); err != nil {
		return in, err
	}
	for k := range obj {
		if err := checkKeyCase("key", k); err != nil {
			return in, err
		}
	}
	delete(obj, "id")
	delete(obj, "text")
	delete(obj, "source")
	return in, in.setMetadata(obj)
}

// The checks below are every format's: a JSONL line's fields and a CSV
// record's cells pass the same ones, with the same reasons.

// CheckID checks a message id as ingest has always checked every line:
// not empty or white space only, no NUL, no other control character, no
// white space
// at its start or end (an id is kept and compared byte for byte, so "a-1 "
// would be another message than "a-1"). The error names what is wrong,
// as a line's rejection does.
func CheckID(id string) error {
	if strings.TrimSpace(id) == "" {
		return errors.New(`"id" is empty`)
	}
	if strings.ContainsRune(id, 0) {
		return errors.New(`"id" contains a NUL character`)
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return fmt.Errorf(`"id" contains a control character, %U at byte %d: %s`, r, i+1, quoteShort(id))
	}
	if strings.TrimFunc(id, unicode.IsSpace) != id {
		return fmt.Errorf(`"id" starts or ends with white space: %s`, quoteShort(id))
	}
	return nil
}

// isFormat reports whether r is a format character (Unicode category Cf).
func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }

// setID checks a new message id and sets it: CheckID, and no format
// character (Unicode category Cf: U+200B ZERO WIDTH SPACE, U+FEFF, U+200E
// LEFT-TO-RIGHT MARK...), invisible yet making another id. The format
// check is for new ids only, not in CheckID: ids stored before it was made
// must still be named to erase them.
func (in *Input) setID(id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if i := strings.IndexFunc(id, isFormat); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return fmt.Errorf(`"id" contains an invisible format character, %U at byte %d: %s; an id is compared byte for byte, `+
			`so it would be another message than the id without it`, r, i+1, quoteShort(id))
	}
	in.ID = id
	return nil
}

// maxQuoted is how many bytes of an id a rejection quotes.
const maxQuoted = 64

// quoteShort is s quoted (Go syntax: "a\n"), its first maxQuoted bytes
// only (then "..."), for a rejection's reason.
func quoteShort(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// missingKey is the error of a line without key: with, when the line has
// keys that differ from it only by case ("ID"), their names.
func missingKey(obj map[string]json.RawMessage, key string) error {
	var like []string
	for k := range obj {
		if strings.EqualFold(k, key) {
			like = append(like, strconv.Quote(k))
		}
	}
	if len(like) == 0 {
		return fmt.Errorf("missing %q", key)
	}
	slices.Sort(like)
	return fmt.Errorf("missing %q (the line has %s; keys are case-sensitive)", key, strings.Join(like, " and "))
}

// reservedKeys are the keys of a line (the columns of a CSV record) that
// are not metadata.
var reservedKeys = []string{"id", "text", "source"}

// checkKeyCase refuses a key (what: "key", or "column" for CSV) that is
// one of reservedKeys but for case ("Source"): it would be kept as
// metadata while the line looks as if it named the field, so it is
// refused as a missing "id" or "text" is.
func checkKeyCase(what, k string) error {
	for _, r := range reservedKeys {
		if k != r && strings.EqualFold(k, r) {
			return fmt.Errorf("%s %q differs from %q only by case; %ss are case-sensitive: name it %q, or give it another name to keep it as metadata",
				what, k, r, what, r)
		}
	}
	return nil
}

// setSource checks a source (no NUL; empty means none) and sets it.
func (in *Input) setSource(source string) error {
	if strings.ContainsRune(source, 0) {
		return errors.New(`"source" contains a NUL character`)
	}
	in.Source = source
	return nil
}

// setText checks a text (a visible character, see pipeline.IsBlank, at most maxText bytes, no
// NUL) and sets it.
func (in *Input) setText(text string, maxText int) error {
	switch {
	case pipeline.IsBlank(text):
		return errors.New(`"text" is empty or only white space`)
	case len(text) > maxText:
		return fmt.Errorf(`"text" is %d bytes; the limit is %d`, len(text), maxText)
	case strings.ContainsRune(text, 0):
		return errors.New(`"text" contains a NUL character`)
	}
	in.Text = text
	return nil
}

// setMetadata encodes meta (a map) as the message's metadata: keys
// sorted, compact, and <, >, & kept as they are (not \u003c...). A NUL
// anywhere in it is refused, naming its path, and so is a number Postgres jsonb cannot
// hold (checkNumbers).
func (in *Input) setMetadata(meta any) error {
	var mb bytes.Buffer
	enc := json.NewEncoder(&mb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(meta); err != nil {
		return fmt.Errorf("metadata: %v", err)
	}
	doc := bytes.TrimSuffix(mb.Bytes(), []byte("\n"))
	if hasNULEscape(doc) {
		return nulError(meta)
	}
	if err := checkNumbers(doc); err != nil {
		return err
	}
	in.Metadata = doc
	return nil
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

// IsIntegerID reports whether s, the text of a JSON number, is an
// integer: ingest takes one as an id, kept as this decimal text.
func IsIntegerID(s string) bool {
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

// StartError is Run's error when it stopped before recording the batch (a
// bad CSV header, an input without messages, an input that is not text, a
// batch id already used, a read that failed before the first line):
// nothing of the input is stored.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// EmptyInputError is the cause of Run's *StartError when the input holds
// no message at all: no byte, only blank lines, or (CSV) only the header.
// No batch is recorded.
type EmptyInputError struct {
	// Reason says what the input held: "it is empty", "it has only blank
	// lines" or "it has only the CSV header row".
	Reason string
}

func (e *EmptyInputError) Error() string { return "the input holds no messages (" + e.Reason + ")" }

// parseFunc checks one line or record, with the text limit in bytes.
type parseFunc func(maxText int) (Input, error)

// handleFunc takes one line or record and its line number; false stops
// the reading.
type handleFunc func(lineNo int, parse parseFunc) bool

// input is one format's reader.
type input interface {
	// read counts the lines or records in sum and hands each to handle,
	// with its line number, until handle returns false. Its error is a
	// read error; it stops (returning nil) when ctx ends.
	read(ctx context.Context, sum *Summary, handle handleFunc) error
	// empty says what the input held, after a read that handed nothing
	// on: EmptyInputError's Reason.
	empty() string
}

// Run reads JSONL or CSV (Config.Format) from r and ingests every line or
// record. Bad ones are rejected with their line number and the rest go on.
// It first reads the start of r (SniffBytes, or all of r when shorter) to
// refuse an input that is not text; the batch is recorded when the first
// line or record that passes its checks is read, and deleted at the end
// when nothing new got into it (every line rejected or a duplicate, or an
// error before the first message was stored: its Summary's BatchID is
// then ""). A value the database refuses (store.ValueError) rejects its
// line like any bad line. Run returns an error only when it cannot go on
// at all: a *StartError when nothing is recorded (a bad CSV header; an
// input without messages, wrapping an *EmptyInputError; an input that is
// compressed, an archive or not text, wrapping an *UnreadableInputError; a
// batch that cannot be recorded; the reader failing or ctx ending before
// the first line), else the reader failing, the database unreachable
// for DBRetryTime, NATS not taking a run for Config.NATSRetryTime, or ctx
// ending; the Summary then says how far it got.
func (in *Ingester) Run(ctx context.Context, r io.Reader) (sum Summary, err error) {
	// BatchID is set once the batch is recorded.
	sum.rej = &rejections{max: in.cfg.MaxErrors, onReject: in.cfg.OnReject}
	defer func() {
		sum.Errors, sum.ErrorsOmitted = sum.rej.kept, sum.rej.omitted
		sort.SliceStable(sum.Errors, func(i, j int) bool { return sum.Errors[i].Line < sum.Errors[j].Line })
		sum.rej = nil
	}()
	// The start of the input is looked at first: a compressed file, or
	// one that is not text at all, is refused whole, rather than line by
	// line, and leaves nothing behind.
	head, r := ReadHead(r)
	if ue := Sniff(head, in.cfg.Format); ue != nil {
		return sum, &StartError{fmt.Errorf("ingest: %w", ue)}
	}
	var src input
	if in.cfg.Format == FormatCSV {
		// The header is checked before the batch is recorded, so a wrong
		// file leaves nothing behind.
		c, err := newCSVInput(r)
		if err != nil {
			return sum, &StartError{fmt.Errorf("ingest: %w", err)}
		}
		src = c
	} else {
		src = newJSONLInput(r)
	}
	return in.run(ctx, src, sum)
}

// run ingests every line or record of src, as Run says, into sum.
func (in *Ingester) run(ctx context.Context, src input, sum Summary) (Summary, error) {
	var err error
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// start records the batch, before the first line that passes its
	// checks is recorded, so an input without any (no lines, or every one
	// rejected) leaves nothing behind either. It is called on the reading
	// goroutine only.
	started := false
	start := func() bool {
		started = true
		st := in.cfg.Store
		// Postgres away (a restart, a cut) is waited out, as for every
		// line's statements; a conflict after a failed try is that try's
		// insert, committed with its answer lost.
		tries := 0
		err := store.Retry(ctx, DBRetryTime, func() error {
			tries++
			return finish(ctx, func(ctx context.Context) error {
				return st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: in.cfg.BatchID, SchemaID: in.cfg.SchemaID, SourceName: in.cfg.SourceName})
			})
		})
		if tries > 1 && errors.Is(err, store.ErrConflict) {
			err = nil
		}
		if err != nil {
			if errors.Is(err, store.ErrConflict) {
				sum.BatchID = in.cfg.BatchID // the batch named exists, from before
			}
			cancel(&StartError{fmt.Errorf("ingest: recording batch %s: %w", in.cfg.BatchID, err)})
			return false
		}
		sum.BatchID = in.cfg.BatchID
		return true
	}
	var readErr error
	if n := max(1, in.cfg.Parallel); n == 1 {
		// One after the other, in line order, on this goroutine.
		readErr = src.read(ctx, &sum, func(lineNo int, parse parseFunc) bool {
			if msg, ok := in.check(lineNo, parse, &sum); ok {
				if !started && !start() {
					return false
				}
				if err := in.record(ctx, lineNo, msg, &sum); err != nil {
					cancel(err)
					return false
				}
			}
			in.progress(lineNo)
			return true
		})
	} else {
		readErr = in.parallel(ctx, cancel, n, src, &sum, func() bool { return started || start() })
	}
	err = context.Cause(ctx)
	if err == nil {
		err = readErr
	}
	if _, ok := errors.AsType[*StartError](err); started && sum.Published == 0 && !ok {
		// Nothing got into the batch (every line rejected, the last ones
		// by the database; every line a duplicate; or the ingest stopped
		// before its first message was stored): it goes, as when no line
		// passes its checks. Whether it holds nothing is decided by the
		// delete itself.
		in.deleteIfEmpty(ctx, &sum)
	}
	if !started {
		switch {
		case err == nil && sum.Rejected > 0:
			// Every line was rejected: the summary says why, line by line.
			return sum, nil
		case err == nil:
			err = fmt.Errorf("ingest: %w", &EmptyInputError{Reason: src.empty()})
		}
		if _, ok := errors.AsType[*StartError](err); !ok {
			err = &StartError{err}
		}
	}
	return sum, err
}

// batchDeleteTime bounds how long deleteIfEmpty waits out an unreachable
// Postgres.
const batchDeleteTime = 10 * time.Second

// deleteIfEmpty deletes the batch when no message and no run names it,
// waiting out a lost connection for up to batchDeleteTime even when ctx
// has ended, and clears sum.BatchID when it did.
func (in *Ingester) deleteIfEmpty(ctx context.Context, sum *Summary) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchDeleteTime)
	defer cancel()
	st := in.cfg.Store
	var deleted bool
	err := store.Retry(dctx, batchDeleteTime, func() error {
		var err error
		deleted, err = st.BatchDeleteEmpty(dctx, st.Pool, in.cfg.BatchID)
		return err
	})
	if err != nil {
		in.log.Warn("deleting an empty batch", zap.String("batch_id", in.cfg.BatchID), zap.Error(err))
	}
	if deleted {
		sum.BatchID = ""
	}
}

// parallel reads and checks src's lines on this goroutine and records and
// publishes them on n goroutines, adding what they did to sum. The lines
// of one message key (source and id) all go to the same goroutine, in
// line order, so the first line of a key is recorded first, and a later
// one with another text is the conflict, as when the lines are taken one
// after the other. start is called before each line is handed on; false
// stops the reading. A line that fails the ingest cancels ctx with its
// error. It returns the read error.
func (in *Ingester) parallel(ctx context.Context, cancel context.CancelCauseFunc, n int, src input, sum *Summary, start func() bool) error {
	type job struct {
		lineNo int
		msg    Input
	}
	jobs := make([]chan job, n)
	parts := make([]Summary, n)
	var wg sync.WaitGroup
	for i := range n {
		parts[i].rej = sum.rej
		jobs[i] = make(chan job, 1)
		wg.Go(func() {
			for j := range jobs[i] {
				if ctx.Err() == nil {
					if err := in.record(ctx, j.lineNo, j.msg, &parts[i]); err != nil {
						cancel(err)
					}
				}
				in.progress(j.lineNo)
			}
		})
	}
	readErr := src.read(ctx, sum, func(lineNo int, parse parseFunc) bool {
		msg, ok := in.check(lineNo, parse, sum)
		if !ok {
			in.progress(lineNo)
			return true
		}
		if !start() {
			return false
		}
		h := fnv.New32a()
		h.Write([]byte(msg.Source))
		h.Write([]byte{0})
		h.Write([]byte(msg.ID))
		select {
		case jobs[h.Sum32()%uint32(n)] <- job{lineNo, msg}:
			return true
		case <-ctx.Done():
			return false
		}
	})
	for _, c := range jobs {
		close(c)
	}
	wg.Wait()
	for _, p := range parts {
		sum.add(p)
	}
	return readErr
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

// jsonlInput reads JSONL: one message a line.
type jsonlInput struct {
	br *bufio.Reader
	// line is the number of the last line read.
	line int
	// data: a byte was read that is not the byte order mark.
	data bool
}

func newJSONLInput(r io.Reader) *jsonlInput {
	return &jsonlInput{br: bufio.NewReaderSize(r, 64<<10)}
}

// read splits the input into lines, counts them in sum, and hands every
// non-blank line to handle until it returns false; a line longer than
// MaxLineBytes is handed on to be rejected.
func (j *jsonlInput) read(ctx context.Context, sum *Summary, handle handleFunc) error {
	for {
		if ctx.Err() != nil {
			return nil // the cause is reported by Run
		}
		line, err := readLine(j.br)
		tooLong := errors.Is(err, errLineTooLong)
		if err != nil && err != io.EOF && !tooLong {
			return fmt.Errorf("ingest: reading line %d: %w", j.line+1, err)
		}
		if len(line) > 0 || err == nil || tooLong {
			j.line++
		}
		if tooLong {
			j.data = true
			sum.Lines++
			if !handle(j.line, rejectTooLong) {
				return nil
			}
			continue
		}
		if j.line == 1 {
			// A UTF-8 byte order mark, as some editors write, is not data.
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		j.data = j.data || len(line) > 0 || err == nil
		if len(bytes.TrimSpace(line)) > 0 {
			if sum.Lines == 0 {
				sum.LooksLikeCSV = looksLikeCSVHeader(line)
			}
			sum.Lines++
			line := bytes.Clone(line)
			if !handle(j.line, func(maxText int) (Input, error) { return ParseLine(line, maxText) }) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// rejectTooLong is the parseFunc of a line longer than MaxLineBytes.
func rejectTooLong(int) (Input, error) {
	return Input{}, fmt.Errorf("line is longer than %d bytes", MaxLineBytes)
}

func (j *jsonlInput) empty() string {
	if j.data {
		return "it has only blank lines"
	}
	return "it is empty"
}

// looksLikeCSVHeader reports whether line reads as a CSV header row with
// "id" and "text" columns.
func looksLikeCSVHeader(line []byte) bool {
	r := csv.NewReader(bytes.NewReader(line))
	names, err := r.Read()
	if err != nil {
		return false
	}
	var id, text bool
	for _, n := range names {
		id = id || strings.TrimSpace(n) == "id"
		text = text || strings.TrimSpace(n) == "text"
	}
	return id && text
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
	s.rej.add(e)
}

// check parses one line or record with parse; one that fails is
// rejected in sum, and ok is false.
func (in *Ingester) check(lineNo int, parse parseFunc, sum *Summary) (msg Input, ok bool) {
	msg, err := parse(in.cfg.MaxTextBytes)
	if err != nil {
		le := LineError{Line: lineNo, ID: msg.ID, Reason: err.Error()}
		if se, ok := errors.AsType[*spanError](err); ok && se.end > lineNo {
			le.EndLine = se.end
		}
		sum.reject(le)
		return msg, false
	}
	return msg, true
}

// record records and publishes one checked line or record, adding what it
// did to sum. It returns an error only for failures that stop the whole
// ingest (the database or the stream is gone).
func (in *Ingester) record(ctx context.Context, lineNo int, msg Input, sum *Summary) error {
	st := in.cfg.Store
	// Postgres restarting is waited out (MessageIngest is idempotent). A
	// retry may find the message its own lost attempt stored.
	var res store.MessageIngestResult
	tries := 0
	err := store.Retry(ctx, DBRetryTime, func() error {
		tries++
		return finish(ctx, func(ctx context.Context) error {
			var err error
			res, err = st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{
				Source: msg.Source, ExternalID: msg.ID, Body: msg.Text, ContentHash: ContentHash(msg.Text),
				Metadata: msg.Metadata, Flags: msg.Flags, BatchID: in.cfg.BatchID, SchemaID: in.cfg.SchemaID,
			})
			return err
		})
	})
	if ve, ok := errors.AsType[*store.ValueError](err); ok {
		// The line's own value, refused on every try: its verdict, not
		// the file's.
		sum.reject(LineError{Line: lineNo, ID: msg.ID, Reason: ve.Error()})
		return nil
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		sum.reject(LineError{Line: lineNo, ID: msg.ID, Reason: "conflict: this id is already stored with a different text; the stored message is kept"})
		return nil
	case errors.Is(err, store.ErrErased):
		sum.reject(LineError{Line: lineNo, ID: msg.ID, Reason: "erased: this id's message was erased (retention erase or purge) and is not stored again"})
		return nil
	case err != nil:
		return fmt.Errorf("ingest: line %d (id %q): %w", lineNo, msg.ID, err)
	}
	if slices.Contains(msg.Flags, FlagInvalidUTF8) {
		// Lines come in order to each part, so its first ones are its
		// lowest.
		sum.InvalidUTF8++
		if len(sum.InvalidUTF8Lines) < MaxInvalidUTF8Lines {
			sum.InvalidUTF8Lines = append(sum.InvalidUTF8Lines, lineNo)
		}
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
	// New, or stored earlier but never published: publish now, through
	// the relay, which records the copy's stream sequence. The dedup key
	// keeps a publish that did land before from being stored twice.
	pub, err := in.publish(ctx, res.Run)
	if errors.Is(err, relay.ErrNotRecorded) {
		err = store.Retry(ctx, DBRetryTime, func() error {
			return finish(ctx, func(ctx context.Context) error { return in.cfg.Relay.Record(ctx, res.Run, pub.Seq) })
		})
		if err != nil {
			return fmt.Errorf("ingest: line %d (id %q): marking published: %w", lineNo, msg.ID, err)
		}
	} else if err != nil {
		return fmt.Errorf("ingest: publishing line %d (id %q): %w; the message is stored and queued, and the next ingest of this file publishes it", lineNo, msg.ID, err)
	}
	if pub.Anomaly {
		sum.DuplicateAnomalies++
		in.log.Error("the stream held another message under this run's dedup id; the run was published under a fresh key",
			zap.Int("line", lineNo), zap.Int64("message_id", res.Run.MessageID))
	}
	if res.Status == store.IngestDuplicate {
		in.log.Info("published a stored run that had not been published", zap.Int64("message_id", res.Run.MessageID))
	}
	if res.Status == store.IngestDuplicate && res.Run.BatchID != in.cfg.BatchID {
		// The run is an earlier batch's (whose ingest stopped before
		// publishing it): a duplicate here, still queued, that this
		// batch's wait covers too.
		sum.Duplicates++
		if res.Run.Status == store.RunQueued {
			sum.Waiting = append(sum.Waiting, store.RunRef{MessageID: res.Run.MessageID, RunNo: res.Run.RunNo})
		}
		return nil
	}
	sum.Published++
	return nil
}

// statementTimeout bounds one statement of a line's ingest.
const statementTimeout = 10 * time.Second

// finish runs one statement of a line's ingest, unless ctx is done
// already, on a context that ctx's cancellation does not reach, bounded
// by statementTimeout. A statement begun is thus ended before Run
// returns: a cancelled commit could otherwise land in Postgres after Run
// reported the line as not stored, and the report read then would miss it.
func finish(ctx context.Context, stmt func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	defer cancel()
	return stmt(sctx)
}

// NATSError is the cause of Run's error when NATS did not take a run:
// it refused it for good, or did not take it for Config.NATSRetryTime.
type NATSError struct {
	// Explanation says what NATS answered, in words (queue.Explain),
	// and how long it was waited for.
	Explanation string
	// Err is NATS's answer: the most telling of the tries.
	Err error
}

func (e *NATSError) Error() string { return e.Explanation + ": " + e.Err.Error() }
func (e *NATSError) Unwrap() error { return e.Err }

// publishAttempt bounds one publish of a run, its retries included; a
// publish not acknowledged by then is tried again (the dedup id keeps a
// late first copy from being stored twice).
const publishAttempt = 10 * time.Second

// publish publishes one run through the relay, which records the copy's
// stream sequence (relay.ErrNotRecorded: published, not recorded; the
// caller records it). While NATS does not take it (queue.IsRetryable:
// the stream at its limits, JetStream out of storage, no responders, the
// connection lost) it waits (250ms, doubling to 5s) and tries again, for
// up to Config.NATSRetryTime from the first failure: back-pressure, never
// a dropped message. The error then says what NATS answered, the most
// telling answer of the tries (queue.Explain).
func (in *Ingester) publish(ctx context.Context, run store.Run) (relay.Published, error) {
	wait := 250 * time.Millisecond
	var since time.Time // the first failure
	var told error      // the most telling answer so far
	for {
		// One publish is bounded by publishAttempt and by what is left of
		// the wait: this loop, not the Publisher's own retries, waits
		// out a NATS that does not answer, and says so at once.
		start := time.Now()
		limit := since.Add(in.cfg.NATSRetryTime)
		if since.IsZero() {
			limit = start.Add(in.cfg.NATSRetryTime)
		}
		if a := start.Add(publishAttempt); a.Before(limit) {
			limit = a
		}
		var pub relay.Published
		// While the connection is down an attempt would wait in the
		// reconnect buffer until limit (up to publishAttempt) before
		// saying anything: wait here instead, and say so.
		err := in.cfg.Publisher.Reconnecting()
		if err == nil {
			pctx, cancel := context.WithDeadline(ctx, limit)
			pub, err = in.cfg.Relay.Publish(pctx, run)
			cancel()
			if err == nil || errors.Is(err, relay.ErrNotRecorded) {
				return pub, err
			}
		}
		if queue.ExplainRank(err) >= queue.ExplainRank(told) {
			told = err
		}
		stream := in.cfg.Publisher.Stream()
		switch {
		case ctx.Err() != nil:
			return relay.Published{}, fmt.Errorf("%w (NATS: %s)", context.Cause(ctx), queue.Explain(told, stream))
		case !queue.IsRetryable(err):
			return relay.Published{}, &NATSError{Explanation: queue.Explain(err, stream), Err: err}
		}
		if since.IsZero() {
			since = start
			in.log.Warn("NATS does not take the run; waiting", zap.Int64("message_id", run.MessageID),
				zap.Duration("retry_time", in.cfg.NATSRetryTime), zap.String("answer", queue.Explain(err, stream)))
		}
		if time.Since(since) >= in.cfg.NATSRetryTime {
			return relay.Published{}, &NATSError{Explanation: fmt.Sprintf("NATS did not take the run for %v: %s", in.cfg.NATSRetryTime, queue.Explain(told, stream)), Err: told}
		}
		select {
		case <-ctx.Done():
			return relay.Published{}, fmt.Errorf("%w (NATS: %s)", context.Cause(ctx), queue.Explain(told, stream))
		case <-time.After(min(wait, time.Until(since.Add(in.cfg.NATSRetryTime)))):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
