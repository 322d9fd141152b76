package provider

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// FixedParts holds the parts of chat requests that are the same on every
// call of a schema (its JSON Schema, above all: 7 KB for
// customer_message as sent), encoded once. go-openai marshals the whole request on
// every call, and encoding/json re-scans the bytes of every json.Marshaler
// it meets (json.RawMessage included) to compact them, twice in tools mode
// (Tool.MarshalJSON marshals a map holding the parameters). So the
// request carries a placeholder, a short JSON string, in the part's place,
// and the Transport sends the part's bytes in its place, shared by every
// request (the body is sent in pieces, nothing copied), on each attempt.
//
// A placeholder is `"extractq-fixed-<nonce>:<n>"`, nonce 16 random hex
// digits drawn per FixedParts: customer text cannot hold it by chance, and
// inside any encoded string a quote is escaped, so only a string token
// whose whole value is the placeholder matches. Safe for concurrent use.
type FixedParts struct {
	prefix []byte // `"extractq-fixed-<nonce>:`

	mu    sync.RWMutex
	parts [][]byte
	byKey map[string]int // SHA-256 of a part as given -> its index
}

// NewFixedParts returns an empty FixedParts with a fresh nonce.
func NewFixedParts() *FixedParts {
	var n [8]byte
	_, _ = rand.Read(n[:]) // crypto/rand.Read does not fail (Go 1.24+)
	return &FixedParts{prefix: []byte(`"extractq-fixed-` + hex.EncodeToString(n[:]) + ":"), byKey: map[string]int{}}
}

// Placeholder returns the placeholder standing for part, a JSON string to
// put where part goes: part is compacted and kept on its first call, and
// the same bytes later get the same placeholder. It returns an error when
// part is not JSON.
func (f *FixedParts) Placeholder(part []byte) (json.RawMessage, error) {
	sum := sha256.Sum256(part)
	key := string(sum[:])
	f.mu.RLock()
	n, ok := f.byKey[key]
	f.mu.RUnlock()
	if !ok {
		var b bytes.Buffer
		if err := json.Compact(&b, part); err != nil {
			return nil, fmt.Errorf("provider: fixed part: %w", err)
		}
		f.mu.Lock()
		if n, ok = f.byKey[key]; !ok {
			n = len(f.parts)
			f.parts = append(f.parts, b.Bytes())
			f.byKey[key] = n
		}
		f.mu.Unlock()
	}
	return f.placeholder(n), nil
}

func (f *FixedParts) placeholder(n int) json.RawMessage {
	p := append([]byte(nil), f.prefix...)
	p = strconv.AppendInt(p, int64(n), 10)
	return append(p, '"')
}

// Splice returns body with every placeholder replaced by its part, or body
// itself when it holds none. It returns an error when a placeholder names
// no part (never sent as is).
func (f *FixedParts) Splice(body []byte) ([]byte, error) {
	pieces, err := f.pieces(body)
	if err != nil || len(pieces) == 1 {
		return body, err
	}
	return bytes.Join(pieces, nil), nil
}

// pieces returns body cut at its placeholders with each one's part in its
// place, sharing body's and the parts' bytes (nothing copied): one piece,
// body, when it holds no placeholder.
func (f *FixedParts) pieces(body []byte) ([][]byte, error) {
	if f == nil {
		return [][]byte{body}, nil
	}
	i := f.next(body, 0)
	if i < 0 {
		return [][]byte{body}, nil
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out [][]byte
	from := 0
	for ; i >= 0; i = f.next(body, from) {
		j := i + len(f.prefix)
		k := bytes.IndexByte(body[j:], '"')
		if k < 0 {
			return nil, fmt.Errorf("provider: unterminated fixed-part placeholder at byte %d", i)
		}
		n, err := strconv.Atoi(string(body[j : j+k]))
		if err != nil || n < 0 || n >= len(f.parts) {
			return nil, fmt.Errorf("provider: fixed-part placeholder at byte %d names no part", i)
		}
		out = append(out, body[from:i], f.parts[n])
		from = j + k + 1
	}
	return append(out, body[from:]), nil
}

// pieceBody is a request body held in pieces (FixedParts.pieces), so that
// a request in flight keeps only its own bytes, the fixed parts shared.
type pieceBody struct {
	pieces [][]byte
	n      int // total length
}

func newPieceBody(pieces [][]byte) pieceBody {
	b := pieceBody{pieces: pieces}
	for _, p := range pieces {
		b.n += len(p)
	}
	return b
}

// cost is estimateCost of the body whose bytes as read were raw: raw
// holds every field estimateCost reads, and the fixed parts (inside
// tools or response_format) add their length.
func (b pieceBody) cost(raw []byte) int {
	return estimateCost(raw) + (b.n-len(raw)+3)/4
}

// reader returns a fresh reader of the whole body.
func (b pieceBody) reader() io.ReadCloser {
	return &piecesReader{pieces: append([][]byte(nil), b.pieces...)}
}

type piecesReader struct{ pieces [][]byte }

// Read fills p from as many pieces as fit: net/http writes what each
// Read returns with a system call of its own once its buffer is
// flushed, and a Read a piece cost a request three or four writes.
func (r *piecesReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(r.pieces) > 0 {
		c := copy(p[n:], r.pieces[0])
		n += c
		r.pieces[0] = r.pieces[0][c:]
		if len(r.pieces[0]) == 0 {
			r.pieces = r.pieces[1:]
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *piecesReader) Close() error { return nil }

// next returns the offset of the first placeholder at or after from whose
// opening quote is not escaped, or -1.
func (f *FixedParts) next(body []byte, from int) int {
	for from < len(body) {
		i := bytes.Index(body[from:], f.prefix)
		if i < 0 {
			return -1
		}
		i += from
		back := 0
		for k := i - 1; k >= 0 && body[k] == '\\'; k-- {
			back++
		}
		if back%2 == 0 {
			return i
		}
		from = i + 1
	}
	return -1
}
