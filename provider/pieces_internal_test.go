package provider

import (
	"bytes"
	"testing"
	"testing/iotest"
)

// TestPiecesReader: a body held in pieces reads as its bytes in order,
// as io.Reader requires, and one Read fills the caller's buffer from as
// many pieces as fit (net/http writes each Read's bytes with a system
// call of its own).
func TestPiecesReader(t *testing.T) {
	pieces := [][]byte{[]byte(`{"model":"m","tools":`), bytes.Repeat([]byte("s"), 7000), nil, []byte(`,"messages":[]}`)}
	want := bytes.Join(pieces, nil)
	if err := iotest.TestReader(newPieceBody(pieces).reader(), want); err != nil {
		t.Fatal(err)
	}
	r := newPieceBody(pieces).reader()
	buf := make([]byte, 32<<10)
	if n, err := r.Read(buf); n != len(want) || err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("one Read into 32 KiB: %d bytes, %v; want all %d", n, err, len(want))
	}
	if pieces[1][0] != 's' || len(pieces[1]) != 7000 {
		t.Fatal("reading changed the shared pieces")
	}
}
