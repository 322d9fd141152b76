package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/extractq/extractq/store"
)

func TestCleanText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":              "",
		"plain ünïcode": "plain ünïcode",
		"a\x00b":        "a\uFFFDb",
		"a\xff\xfeb":    "a\uFFFD\uFFFDb", // one U+FFFD per invalid byte, as []rune reads it
	} {
		got := store.CleanText(in)
		if got != want {
			t.Errorf("CleanText(%q) = %q, want %q", in, got, want)
		}
		if utf8.RuneCountInString(got) != len([]rune(in)) {
			t.Errorf("CleanText(%q) changed the code-point count", in)
		}
	}
}

func TestCleanJSON(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"b"}`:                   `{"a":"b"}`,
		`{"a":"x\u0000y"}`:            `{"a":"x\ufffdy"}`,
		`{"a":"\\u0000"}`:             `{"a":"\\u0000"}`, // an escaped backslash, not a NUL
		`{"a":"\\\u0000"}`:            `{"a":"\\\ufffd"}`,
		`{"a":"\ud83d\ude00"}`:        `{"a":"\ud83d\ude00"}`, // a valid pair is kept
		`{"a":"\ud83d"}`:              `{"a":"\ufffd"}`,
		`{"a":"\ud83dx"}`:             `{"a":"\ufffdx"}`,
		`{"a":"\ude00"}`:              `{"a":"\ufffd"}`,
		`{"a":"\ud83d\u0041"}`:        `{"a":"\ufffd\u0041"}`,
		`{"\u0000":1}`:                `{"\ufffd":1}`,
		"{\"a\":\"\xff\"}":            "{\"a\":\"\uFFFD\"}",
		`["\u0000", "\"\u0000"]`:      `["\ufffd", "\"\ufffd"]`,
		`{"a":"\u00e9\u0000"}`:        `{"a":"\u00e9\ufffd"}`,
		`{"unterminated":"\u00`:       `{"unterminated":"\u00`,
		`{"a":"\ud83d\ude00\ud83d"}`:  `{"a":"\ud83d\ude00\ufffd"}`,
		`{"a":1,"b":[true,null,"x"]}`: `{"a":1,"b":[true,null,"x"]}`,
	} {
		if got := string(store.CleanJSON(json.RawMessage(in))); got != want {
			t.Errorf("CleanJSON(%s) = %s, want %s", in, got, want)
		}
	}
}

// FuzzCleanJSON checks that CleanJSON keeps valid JSON valid and leaves no
// escape Postgres jsonb refuses.
func FuzzCleanJSON(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, `["\ud800\udc00","\udc00"]`, `"\\u0000"`, `{"a":"\ud83d\u0041"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := store.CleanJSON(json.RawMessage(in))
		if json.Valid([]byte(in)) && !json.Valid(out) {
			t.Fatalf("CleanJSON(%q) = %q, not valid JSON", in, out)
		}
		if !utf8.Valid(out) {
			t.Fatalf("CleanJSON(%q) = %q, not UTF-8", in, out)
		}
		if json.Valid(out) {
			var v any
			if err := json.Unmarshal(out, &v); err == nil && hasNUL(v) {
				t.Fatalf("CleanJSON(%q) = %q still decodes to a NUL", in, out)
			}
		}
	})
}

func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}
