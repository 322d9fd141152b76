package ingest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/extractq/extractq/ingest"
)

// BenchmarkParseLine parses the lines of the real sample
// (testdata/abcd/messages.jsonl: 1,735 lines of 459 to 1,717 bytes, each
// with nested metadata), one line an operation, in turn.
func BenchmarkParseLine(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "abcd", "messages.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
	var size int64
	for _, line := range lines {
		if _, err := ingest.ParseLine(line, 32768); err != nil {
			b.Fatalf("%s: %v", line, err)
		}
		size += int64(len(line))
	}
	b.SetBytes(size / int64(len(lines)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := ingest.ParseLine(lines[i], 32768); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(lines) {
			i = 0
		}
	}
}
