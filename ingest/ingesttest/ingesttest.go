// Package ingesttest helps the tests of package ingest and of its callers
// (ingestapi, cmd/ingest): a private Postgres schema and stream to ingest
// into, and inputs that are not text (compressed, archives, UTF-16,
// random bytes).
package ingesttest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// Schema is the schema every test batch is ingested with (the default
// configuration's first schema).
const Schema = "customer_message"

// MaxText is the text limit of the tests, in bytes; the fixtures in
// testdata/bad-input assume it.
const MaxText = 200

// Env is one test's own Postgres schema and stream.
type Env struct {
	Store  *store.Store
	JS     jetstream.JetStream
	NATS   config.NATS
	Stream jetstream.Stream
	Pub    *queue.Publisher
}

// NewEnv gives the test a private schema (storetest.NewStore) and a
// private stream (queuetest.NewStream), deleted when it ends.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := q.JS.Stream(ctx, q.NATS.Stream)
	if err != nil {
		t.Fatalf("ingesttest: stream %s: %v", q.NATS.Stream, err)
	}
	return &Env{Store: st, JS: q.JS, NATS: q.NATS, Stream: s, Pub: queue.NewPublisher(q.JS, q.NATS)}
}

// Ingest runs a new Ingester (new batch) over r; edit may change its
// config. It checks that the summary names the batch when it was
// recorded, else "".
func (e *Env) Ingest(t testing.TB, r io.Reader, edit func(*ingest.Config)) (ingest.Summary, error) {
	t.Helper()
	cfg := ingest.Config{Store: e.Store, Publisher: e.Pub, SchemaID: Schema, MaxTextBytes: MaxText,
		SourceName: "test", Logger: zaptest.NewLogger(t)}
	if edit != nil {
		edit(&cfg)
	}
	ing, err := ingest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := ing.Run(t.Context(), r)
	var recorded bool
	if qerr := e.Store.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM batches WHERE id = $1)`, ing.BatchID()).Scan(&recorded); qerr != nil {
		t.Fatal(qerr)
	}
	if want := map[bool]string{true: ing.BatchID(), false: ""}[recorded]; sum.BatchID != want {
		t.Errorf("summary batch %q, want %q (ingester batch %q, recorded %v)", sum.BatchID, want, ing.BatchID(), recorded)
	}
	return sum, err
}

// IngestFile is Ingest of the file at path.
func (e *Env) IngestFile(t testing.TB, path string, edit func(*ingest.Config)) (ingest.Summary, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return e.Ingest(t, f, edit)
}

// Messages returns the stored messages' ids by external id (sources are
// ignored; tests that mix sources do not call it).
func (e *Env) Messages(t testing.TB) map[string]int64 {
	t.Helper()
	rows, err := e.Store.Pool.Query(t.Context(), `SELECT external_id, id FROM messages`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var ext string
		var id int64
		if err := rows.Scan(&ext, &id); err != nil {
			t.Fatal(err)
		}
		out[ext] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// CountSQL returns the one integer sql selects.
func (e *Env) CountSQL(t testing.TB, sql string) int {
	t.Helper()
	var n int
	if err := e.Store.Pool.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// StreamMsgs returns how many messages the stream holds.
func (e *Env) StreamMsgs(t testing.TB) uint64 {
	t.Helper()
	info, err := e.Stream.Info(t.Context())
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// AssertStream checks that the stream holds exactly one message per
// message in msgs: run 1 of batch batchID on the schema's subject, with
// the run's dedup id as Nats-Msg-Id.
func (e *Env) AssertStream(t testing.TB, batchID string, msgs map[string]int64) {
	t.Helper()
	ctx := t.Context()
	info, err := e.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(msgs)) {
		t.Errorf("stream holds %d messages, want %d", info.State.Msgs, len(msgs))
	}
	seen := map[int64]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := e.Stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		var env queue.Envelope
		if err := json.Unmarshal(m.Data, &env); err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		if m.Subject != e.NATS.RunsSubject(Schema) {
			t.Errorf("message %d subject %q, want %q", seq, m.Subject, e.NATS.RunsSubject(Schema))
		}
		want := queue.Envelope{MessageID: env.MessageID, RunNo: 1, BatchID: batchID, SchemaID: Schema}
		if env != want {
			t.Errorf("message %d envelope %+v, want %+v", seq, env, want)
		}
		var dedupID string
		var runSeq uint64
		if err := e.Store.Pool.QueryRow(ctx, `SELECT dedup_id, coalesce(stream_seq, 0) FROM runs WHERE message_id = $1 AND run_no = 1`,
			env.MessageID).Scan(&dedupID, &runSeq); err != nil {
			t.Fatalf("message %d: run of message id %d: %v", seq, env.MessageID, err)
		}
		if got := m.Header.Get(nats.MsgIdHdr); got != dedupID {
			t.Errorf("message %d Nats-Msg-Id %q, want the run's dedup id %q", seq, got, dedupID)
		}
		if runSeq != seq {
			t.Errorf("message %d: the run records stream sequence %d", seq, runSeq)
		}
		if seen[env.MessageID] {
			t.Errorf("message id %d published twice", env.MessageID)
		}
		seen[env.MessageID] = true
	}
	for ext, id := range msgs {
		if !seen[id] {
			t.Errorf("message %q (id %d) not on the stream", ext, id)
		}
	}
}

// GoodLines is n JSONL lines of good messages ("u-0", ...).
func GoodLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": "u-%d", "text": "Where is order %d?"}`+"\n", i, 48000+i)
	}
	return b.String()
}

// Gzipped is s compressed with gzip.
func Gzipped(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Zipped is a zip archive holding s as the file name.
func Zipped(t testing.TB, name, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Tarred is a tar archive holding s as the file name.
func Tarred(t testing.TB, name, s string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(s))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// RandomBytes is n bytes of (seeded) random data.
func RandomBytes(n int) string {
	r := rand.NewChaCha8([32]byte{7})
	b := make([]byte, n)
	r.Read(b)
	return string(b)
}

// UTF16LE is s in UTF-16, little-endian.
func UTF16LE(s string) string {
	var b strings.Builder
	for _, u := range utf16.Encode([]rune(s)) {
		b.WriteByte(byte(u))
		b.WriteByte(byte(u >> 8))
	}
	return b.String()
}

// WriteFile writes body to the file name in dir and returns its path.
func WriteFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// EmptyInput is an input that holds no message, in a format: Run records
// no batch and says why (Reason of its *ingest.EmptyInputError).
type EmptyInput struct {
	Name   string
	Format ingest.Format
	File   string // a file name for it, of its format
	In     string
	Reason string
}

// EmptyInputs hold no message, in either format.
var EmptyInputs = []EmptyInput{
	{"empty JSONL", ingest.FormatJSONL, "empty.jsonl", "", "it is empty"},
	{"JSONL of a byte order mark only", ingest.FormatJSONL, "bom.jsonl", "\ufeff", "it is empty"},
	{"JSONL of blank lines only", ingest.FormatJSONL, "blank.jsonl", "\n  \n\t\r\n", "it has only blank lines"},
	{"empty CSV", ingest.FormatCSV, "empty.csv", "", "it is empty"},
	{"CSV of blank lines only", ingest.FormatCSV, "blank.csv", "\ufeff\r\n\n", "it has only blank lines"},
	{"CSV of a header only", ingest.FormatCSV, "header.csv", "id,text,channel\r\n", "it has only the CSV header row"},
	{"CSV of a header and blank lines", ingest.FormatCSV, "header-blank.csv", "\ufeffid,text\n\n\r\n", "it has only the CSV header row"},
	{"CSV of lines of spaces only", ingest.FormatCSV, "spaces.csv", "  \r\n\t\n \r", "it has only blank lines"},
	{"CSV of a header and lines of spaces", ingest.FormatCSV, "header-spaces.csv", "id,text\n   \n\t \r\n  ", "it has only the CSV header row"},
}
