package pipeline

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/extractq/extractq/extracttype"
)

func TestParseReply(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		reply    string
		ok       bool
		stripped string
		keyword  string
	}{
		{"Strict", `{"a":1}`, true, "", ""},
		{"Fence", "```json\n{\"a\":1}\n```", true, "fence", ""},
		{"Prose", `Here is the record: {"a":1} Hope this helps.`, true, "prose", ""},
		{"Reasoning", `<think>the order is {maybe}</think>{"a":1}`, true, "reasoning", ""},
		{"SameObjectTwice", `{"a":1} and again {"a":1}`, true, "prose", ""},
		{"TwoObjects", `{"a":1} or {"a":2}`, false, "", "multiple_objects"},
		{"DuplicateKey", `{"a":1,"a":2}`, false, "", "duplicate_key"},
		{"DuplicateKeyInProse", `record: {"a":1,"a":2}`, false, "", "duplicate_key"},
		{"NotJSON", `I cannot find an order id.`, false, "", ""},
		{"Empty", "  ", false, "", ""},
		{"Array", `[1,2]`, false, "", ""},
		{"Truncated", `{"a":"abc`, false, "", ""},
		{"Deep", strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100), false, "", ""},
		{"BraceInString", `note {"a":"}{"} end`, true, "prose", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep, errs := ParseReply(tc.reply)
			if tc.ok {
				if len(errs) != 0 || rep.Object == nil {
					t.Fatalf("errs %v", errs)
				}
				if rep.Stripped != tc.stripped {
					t.Fatalf("stripped %q, want %q", rep.Stripped, tc.stripped)
				}
				return
			}
			if len(errs) != 1 || errs[0].Kind != extracttype.KindParse {
				t.Fatalf("errs %v", errs)
			}
			if tc.keyword != "" && errs[0].Keyword != tc.keyword {
				t.Fatalf("keyword %q, want %q", errs[0].Keyword, tc.keyword)
			}
		})
	}
}

func TestDecodeStrictKeepsNumbers(t *testing.T) {
	t.Parallel()
	v, err := DecodeStrict([]byte(`{"n": 1e400, "m": 12345678901234567890}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["n"].(json.Number).String() != "1e400" || m["m"].(json.Number).String() != "12345678901234567890" {
		t.Fatalf("numbers coerced: %v", m)
	}
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{`{"a":1}`, "```json\n{\"a\":[1,{\"b\":null}]}\n```", `x {"a":"}"} y`, `{"a":1,"a":2}`, `<think>{</think>{}`, `{"a":"\u0000"}`, `{"a":"\ud800"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rep, errs := ParseReply(s)
		if len(errs) == 0 && rep.Object == nil {
			t.Fatal("no error and no object")
		}
		if len(errs) > 0 && rep.Object != nil {
			t.Fatal("errors and an object")
		}
		if rep.Object != nil {
			if _, err := json.Marshal(rep.Object); err != nil {
				t.Fatalf("object does not re-encode: %v", err)
			}
		}
	})
}

func TestHasLoneSurrogate(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		`{"a":"\ud800"}`:       true,
		`{"a":"\udc00x"}`:      true,
		`{"a":"\ud83d\ude00"}`: false, // a pair: 😀
		`{"a":"\\ud800"}`:      false, // an escaped backslash, then text
		`{"a":"plain"}`:        false,
		`{"a":"\ud83d\u0041"}`: true,
		`{"a":"\u00e9\uD800"}`: true,
	} {
		if got := HasLoneSurrogate(s); got != want {
			t.Errorf("%s: %v, want %v", s, got, want)
		}
	}
}

// decodeCases are JSON texts at the edges of the grammar and of
// DecodeStrict's limits.
func decodeCases() []string {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	return []string{
		`{}`, `[]`, ` {"a" : [1, -0, 1.5e+3, 0.1E-2, 2e5, true, false, null, "x\"y", "\u00e9", "é", "\ud83d\ude00", "\ud800", "\/", "a\\b"]} `,
		`"plain"`, `12`, `-1.25`, `true`, `null`, "\t\r\n{\"a\":1}\n",
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"b":1,"b":1}}`, `[{"x":1},{"x":1,"x":2}]`, `{"a":1,"a":2,}`,
		`[1,]`, `{"a":1,}`, `{,}`, `[,1]`, `01`, `-`, `-01`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `1.5.2`, `--1`,
		"\"a\x01b\"", "\"tab\there\"", "\"\xff\xfe\"", "\xff", "\"ok\xc3\"", "\"\xed\xa0\x80\"", "\ufeff{}",
		`{"a":1} x`, `{"a":1} {}`, `{"a":1}}`, `"abc`, `tru`, `nul`, `nulll`, `truex`, `[1 2]`, `{"a" 1}`, `{"a":}`, `{"a"}`,
		`{1:2}`, `["a\x"]`, `"\u12"`, `"\u12G4"`, `"\`, `[`, `{`, `{"a":[}`, `[1]]`, ``, `   `,
		deep(64), deep(65), deep(66), deep(200), deepObj(64), deepObj(65), deepObj(66),
		`{"":1,"":2}`, `{"a/b~c":{"x":[0,{"y":1,"y":2}]}}`, `[1e400,12345678901234567890,-0.0]`,
	}
}

// TestDecodeFastMatchesTokens checks that the fast decoder accepts exactly
// what the token decoder accepts, with the same values, on edge cases and
// on every reply of the ABCD sample.
func TestDecodeFastMatchesTokens(t *testing.T) {
	t.Parallel()
	inputs := decodeCases()
	for _, c := range sampleCases(t) {
		inputs = append(inputs, c.first, c.repair)
	}
	for _, s := range inputs {
		checkDecode(t, s)
	}
}

func checkDecode(t *testing.T, s string) {
	t.Helper()
	fv, fok := decodeFast(s)
	tv, terr := decodeTokens([]byte(s))
	if fok != (terr == nil) {
		t.Fatalf("%q: fast ok %v, token decoder error %v", s, fok, terr)
	}
	if fok && !reflect.DeepEqual(fv, tv) {
		t.Fatalf("%q: fast %#v, token decoder %#v", s, fv, tv)
	}
	dv, derr := DecodeStrict([]byte(s))
	if !reflect.DeepEqual(dv, tv) || fmt.Sprint(derr) != fmt.Sprint(terr) {
		t.Fatalf("%q: DecodeStrict %#v %v, token decoder %#v %v", s, dv, derr, tv, terr)
	}
}

func FuzzDecodeStrict(f *testing.F) {
	for _, s := range decodeCases() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkDecode(t, s)
	})
}

// Each syntax slip gets its own line with its position instead of "reply
// holds no JSON object".
func TestParseReplySyntaxSlips(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, reply string
		want        extracttype.ErrorList
	}{
		{"TrailingComma", "{\"a\": 1,\n \"b\": 2,\n}",
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "trailing_comma", Message: "line 2, column 8: trailing comma before }; remove it"}}},
		{"TrailingCommaInArray", `{"a": [1, 2,]}`,
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "trailing_comma", Message: "line 1, column 12: trailing comma before ]; remove it"}}},
		{"RawNewline", "{\"note\": \"line one\nline two\"}",
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "raw_newline", Message: `line 1, column 19: raw line break inside a string; write \n`}}},
		{"SingleQuotes", `{'intent': 'refund_status'}`,
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "single_quotes", Message: "line 1, column 2: single-quoted string; JSON keys and strings take double quotes"}}},
		{"SingleQuotedValue", `{"intent": 'refund_status'}`,
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "single_quotes", Message: "line 1, column 12: single-quoted string; JSON keys and strings take double quotes"}}},
		{"UnclosedString", `Here: {"intent": "refund_status}`,
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "unclosed_string", Message: `line 1, column 18: string is never closed; end it with "`}}},
		{"TwoSlips", "{\"a\": 'x',\n}",
			extracttype.ErrorList{
				{Kind: extracttype.KindParse, Keyword: "single_quotes", Message: "line 1, column 7: single-quoted string; JSON keys and strings take double quotes"},
				{Kind: extracttype.KindParse, Keyword: "trailing_comma", Message: "line 1, column 10: trailing comma before }; remove it"},
			}},
		{"AfterReasoning", "<think>{'x',}</think>\n{\"a\": 1,}",
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "trailing_comma", Message: "line 2, column 8: trailing comma before }; remove it"}}},
		{"NoObject", `I cannot find it, sorry, 'really'.`,
			extracttype.ErrorList{{Kind: extracttype.KindParse, Message: "reply holds no JSON object; return one JSON object only"}}},
		{"CommaInStringIsFine", `{"a": "x,}" , }`,
			extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "trailing_comma", Message: "line 1, column 13: trailing comma before }; remove it"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errs := ParseReply(tt.reply)
			if !reflect.DeepEqual(errs, tt.want) {
				t.Errorf("errors\n got %#v\nwant %#v", errs, tt.want)
			}
		})
	}
}
