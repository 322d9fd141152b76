package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/extractq/extractq/internal/words"
)

// SniffBytes is how much of the start of an input Run looks at, before
// recording the batch, to tell whether the input is text at all.
const SniffBytes = 4 << 10

// FormatJSON is the format of an application/json body (ingestapi), in
// UnreadableInputError only: the body is turned into JSONL before Run
// reads it, and FormatFor does not take it.
const FormatJSON Format = "json"

// Kinds of UnreadableInputError.
const (
	KindGzip   = "gzip"
	KindZstd   = "zstd"
	KindBzip2  = "bzip2"
	KindXz     = "xz"
	KindZip    = "zip"
	KindTar    = "tar"
	KindUTF16  = "UTF-16"
	KindBinary = "binary"
)

// magics are the compressed formats and archives known by the bytes they
// start with; tar's are at offset 257 (POSIX, then GNU). bzip2's "BZh" is
// followed by the block size, '1' to '9': so a CSV header such as
// "BZhandle,..." is not taken for one.
var magics = []struct {
	kind  string
	at    int
	magic string
}{
	{KindGzip, 0, "\x1f\x8b"},
	{KindZstd, 0, "\x28\xb5\x2f\xfd"},
	{KindBzip2, 0, "BZh1"}, {KindBzip2, 0, "BZh2"}, {KindBzip2, 0, "BZh3"},
	{KindBzip2, 0, "BZh4"}, {KindBzip2, 0, "BZh5"}, {KindBzip2, 0, "BZh6"},
	{KindBzip2, 0, "BZh7"}, {KindBzip2, 0, "BZh8"}, {KindBzip2, 0, "BZh9"},
	{KindXz, 0, "\xfd7zXZ\x00"},
	{KindZip, 0, "PK\x03\x04"},
	{KindZip, 0, "PK\x05\x06"}, // an empty archive
	{KindTar, 257, "ustar\x00"},
	{KindTar, 257, "ustar  \x00"},
}

// UnreadableInputError is the cause of Run's *StartError when the start
// of the input shows it is not text to read: compressed (gzip, zstd,
// bzip2, xz), an archive (zip, tar), UTF-16 (JSONL only: a CSV header
// says so itself), or binary data. Nothing of it is read and no batch is
// recorded.
type UnreadableInputError struct {
	// Kind is one of KindGzip, KindZstd, KindBzip2, KindXz, KindZip,
	// KindTar, KindUTF16 and KindBinary.
	Kind string
	// Format is the format the input was to be read as (for a POST, JSON
	// too).
	Format Format
	// Detail says what shows it: "it starts with the bytes 1f 8b", "1203
	// of its first 4096 bytes are control characters or not UTF-8".
	Detail string
}

// Describe says what the input is, after its name: "is gzip-compressed
// (it starts with the bytes 1f 8b), not JSONL text".
func (e *UnreadableInputError) Describe() string {
	f := "JSONL"
	switch e.Format {
	case FormatCSV:
		f = "CSV"
	case FormatJSON:
		f = "JSON"
	}
	switch e.Kind {
	case KindGzip, KindZstd, KindBzip2, KindXz:
		return fmt.Sprintf("is %s-compressed (%s), not %s text", e.Kind, e.Detail, f)
	case KindZip:
		return fmt.Sprintf("is a zip archive (%s; an Excel .xlsx workbook is one too), not %s text", e.Detail, f)
	case KindTar:
		return fmt.Sprintf("is a tar archive (%s), not %s text", e.Detail, f)
	case KindUTF16:
		return fmt.Sprintf("looks like UTF-16 (%s); only UTF-8 is read", e.Detail)
	}
	return fmt.Sprintf("does not look like JSONL or CSV text (%s)", e.Detail)
}

func (e *UnreadableInputError) Error() string { return "the input " + e.Describe() }

// Unpack is the command that turns a file (or, for "-", stdin) of this
// kind into text, to pipe into ingest: "gunzip -c FILE", "iconv -f UTF-16
// -t UTF-8 FILE"; "" for binary data. file is quoted for a shell.
func (e *UnreadableInputError) Unpack(file string) string {
	stdin := file == "-"
	q := " " + words.ShellQuote(file)
	if stdin {
		q = ""
	}
	switch e.Kind {
	case KindGzip:
		return "gunzip -c" + q
	case KindZstd:
		return "zstd -dc" + q
	case KindBzip2:
		return "bunzip2 -c" + q
	case KindXz:
		return "xz -dc" + q
	case KindZip:
		if stdin {
			return "funzip" // the first file of the archive
		}
		return "unzip -p" + q
	case KindTar:
		if stdin {
			return "tar -xOf -"
		}
		return "tar -xOf" + q
	case KindUTF16:
		return "iconv -f UTF-16 -t UTF-8" + q
	}
	return ""
}

// Sniff says what head, the start of an input to be read as format, is
// when it shows the input is not text (nil for text): the magic bytes of
// a compressed format or an archive, UTF-16 (for JSONL: newCSVInput
// reports it for CSV), or binary data. It is conservative: text in any 8-bit
// encoding (Latin-1, say, whose bytes are not UTF-8 and are each stored as
// U+FFFD) passes, and so does text with a few control characters; binary
// data is told by control characters, which text of any 8-bit encoding
// (nearly) never holds, together with bytes that are not UTF-8.
func Sniff(head []byte, format Format) *UnreadableInputError {
	for _, m := range magics {
		if len(head) >= m.at+len(m.magic) && string(head[m.at:m.at+len(m.magic)]) == m.magic {
			detail := "it starts with the bytes " + hexBytes(m.magic)
			if m.at > 0 {
				detail = fmt.Sprintf("it holds %q at byte %d", strings.TrimRight(m.magic, " \x00"), m.at+1)
			}
			return &UnreadableInputError{Kind: m.kind, Format: format, Detail: detail}
		}
	}
	cut := len(head) == SniffBytes // more of the input follows
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	if len(head) == 0 {
		return nil
	}
	if utf16 := looksUTF16(head); utf16 != "" {
		if format == FormatCSV {
			return nil // checkHeaderBytes says so, as it always did
		}
		return &UnreadableInputError{Kind: KindUTF16, Format: format, Detail: utf16}
	}
	controls, invalid := 0, 0
	for i := 0; i < len(head); {
		c := head[i]
		if c < utf8.RuneSelf {
			// C0 controls but tab, line ends, vertical tab, form feed and
			// escape, which text may hold.
			if c < 0x20 && c != '\t' && c != '\n' && c != '\v' && c != '\f' && c != '\r' && c != 0x1b {
				controls++
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && n == 1 {
			if cut && !utf8.FullRune(head[i:]) {
				break // a character cut off by the end of head
			}
			invalid++
		}
		i += n
	}
	// Binary: a tenth of the bytes are controls, or a fiftieth are and a
	// fifth are controls or not UTF-8. Random bytes (compressed or
	// encrypted data) are about 10% controls and 43% not UTF-8; text in
	// Latin-1, Windows-1251, Shift-JIS or GB18030 has no controls, and up
	// to 60% of its bytes are not UTF-8.
	if n := len(head); 10*controls >= n || (50*controls >= n && 5*(controls+invalid) >= n) {
		return &UnreadableInputError{Kind: KindBinary, Format: format,
			Detail: fmt.Sprintf("%d of its first %d bytes are control characters or not UTF-8", controls+invalid, n)}
	}
	return nil
}

// looksUTF16 says why head looks like UTF-16 ("" when it does not): a
// UTF-16 byte order mark, or NUL bytes between the characters, a quarter
// of the bytes or more, nearly all on odd or all on even offsets.
func looksUTF16(head []byte) string {
	if bytes.HasPrefix(head, []byte("\xff\xfe")) || bytes.HasPrefix(head, []byte("\xfe\xff")) {
		return "it starts with a UTF-16 byte order mark"
	}
	var nuls [2]int
	for i, c := range head {
		if c == 0 {
			nuls[i%2]++
		}
	}
	all := nuls[0] + nuls[1]
	if 4*all >= len(head) && 10*max(nuls[0], nuls[1]) >= 9*all {
		return "NUL bytes between the characters"
	}
	return ""
}

// hexBytes is s as hex bytes: "1f 8b".
func hexBytes(s string) string {
	var b bytes.Buffer
	for i := range len(s) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%02x", s[i])
	}
	return b.String()
}

// ReadHead reads up to SniffBytes of r: head, and a reader giving all of
// r's bytes again, head first, and then r's error, if reading head met
// one, as r would have (so a failing read is reported on the line it
// fails on, as without the look ahead).
func ReadHead(r io.Reader) (head []byte, all io.Reader) {
	buf := make([]byte, SniffBytes)
	n, err := io.ReadFull(r, buf)
	head = buf[:n]
	switch {
	case err == nil:
		return head, io.MultiReader(bytes.NewReader(head), r)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return head, bytes.NewReader(head)
	}
	return head, io.MultiReader(bytes.NewReader(head), errorReader{err})
}

// errorReader fails every read with err.
type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }
