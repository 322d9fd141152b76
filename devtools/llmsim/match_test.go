package llmsim

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
)

func TestFindTokens(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`[0-9]{10}`)
	re.Longest()
	text := "ids 7149958247, x1234567890 and 123456789012 then (0386320588)"
	var got []string
	for _, loc := range findTokens(re, text) {
		got = append(got, text[loc[0]:loc[1]])
	}
	if want := []string{"7149958247", "0386320588"}; !reflect.DeepEqual(got, want) {
		t.Errorf("findTokens = %q, want %q (no token glued to letters or longer digit runs)", got, want)
	}
}

func TestCountPhrase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		phrase, text string
		want         int
	}{
		{"refund", "I was Refunded, then refund again", 2},
		{"bill", "my billing and the bill", 2},
		{"fee", "coffee fees", 0},
		{"2fa", "reset 2fa please", 1},
		{"charged twice", "they charged me twice", 0},
		{"charged twice", "I was CHARGED  twice", 1},
		{"michael kors jeans", "michael_kors jeans", 1},
	} {
		if got := countPhrase(tc.phrase, tc.text); got != tc.want {
			t.Errorf("countPhrase(%q, %q) = %d, want %d", tc.phrase, tc.text, got, tc.want)
		}
	}
}

func TestKeywordBefore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text, val string
		kw        []string
		want      bool
	}{
		{"my account id is U85ALFLG2Z", "U85ALFLG2Z", []string{"account"}, true},
		{"Zip: 12818", "12818", []string{"zip"}, true},
		{"the state of my refund", "of", []string{"state"}, false},
		{"state: ca", "ca", []string{"state"}, true},
		{"my billing statement said 20", "20", []string{"state"}, false},
		{"account\nyes its 7149958247", "7149958247", []string{"account"}, false},
		{"my order. 7149958247", "7149958247", []string{"order"}, false},
	} {
		pos := len(tc.text) - len(tc.val)
		if got := keywordBefore(tc.text, pos, tc.kw, tc.val); got != tc.want {
			t.Errorf("keywordBefore(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestPatternShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern    string
		searchable bool
		minLen     int
	}{
		{"^[0-9]{10}$", true, 10},
		{"^[A-Za-z0-9]{10}$", true, 10},
		{"^[0-9]{3,5}$", true, 3},
		{"^[^0-9@\\r\\n]+$", false, 1},
		{"^[0-9]{1,6}[A-Za-z]?\\s+\\S.*$", false, 3},
	} {
		if got := searchablePattern(tc.pattern); got != tc.searchable {
			t.Errorf("searchablePattern(%q) = %v, want %v", tc.pattern, got, tc.searchable)
		}
		if got := minLen(stripAnchors(tc.pattern)); got != tc.minLen {
			t.Errorf("minLen(%q) = %d, want %d", tc.pattern, got, tc.minLen)
		}
	}
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []string{`^[0-9]{10}$`, `^[A-Z0-9]{10}$`, `^SKU-[0-9]{4}$`, `^1Z[0-9A-Z]{16}$`, `^(ab|cd)+x?$`,
		`^\+?\(?[0-9]{1,4}\)?([ .-]?[0-9]{2,4}){1,4}$`} {
		re := regexp.MustCompile(p)
		for i := 0; i < 50; i++ {
			if s := generate(p, rng); !re.MatchString(s) {
				t.Fatalf("generate(%q) = %q does not match", p, s)
			}
		}
	}
}

func TestConversation(t *testing.T) {
	t.Parallel()
	if got := messageBlock("Extract.\n<message>\nline one\nline two\n</message>"); got != "line one\nline two" {
		t.Errorf("messageBlock = %q", got)
	}
	if got := messageBlock("no block here"); got != "no block here" {
		t.Errorf("messageBlock without a block = %q", got)
	}
	got := errorLines("Your JSON has these errors:\n/order_id: missing\n/items/0/qty: must be >= 1\n/: not JSON\nReturn the corrected JSON only.")
	want := []errorLine{{"/order_id", "missing"}, {"/items/0/qty", "must be >= 1"}, {"/", "not JSON"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errorLines = %+v, want %+v", got, want)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(config.Simulator{}, zaptest.NewLogger(t)).Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestEnumKeyedArray(t *testing.T) {
	t.Parallel()
	// Elements whose only possible key is an enum: one per value named,
	// in text order, keyed by the first enum property of "required" that
	// has a value named, each filled from its own line.
	const schema = `{"type": "object", "required": ["items"], "properties": {
	  "items": {"type": "array", "items": {"type": "object", "required": ["product", "problem", "quantity"],
	    "properties": {
	      "problem": {"type": ["string", "null"], "enum": ["wrong_size", "stain", null]},
	      "product": {"type": ["string", "null"], "enum": ["guess jeans", "michael kors jacket", null]},
	      "quantity": {"type": ["integer", "null"], "minimum": 1}}}}}}`
	d, err := parseSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	f := &filler{d: d, re: &regexCache{}}
	for _, tc := range []struct {
		text string
		want []any
	}{
		{"hi\nthe Michael Kors Jacket has a stain\nand my guess jeans are the wrong size", []any{
			map[string]any{"product": "michael kors jacket", "problem": "stain", "quantity": nil},
			map[string]any{"product": "guess jeans", "problem": "wrong_size", "quantity": nil},
		}},
		{"I bought the wrong size", []any{
			map[string]any{"product": nil, "problem": "wrong_size", "quantity": nil},
		}},
		{"nothing to report", []any{}},
	} {
		got := f.fill(tc.text).(map[string]any)["items"]
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("items for %q:\n got %v\nwant %v", tc.text, got, tc.want)
		}
	}
	if got := phraseIndex("guess jeans", "my Guess  jeans"); got != 3 {
		t.Errorf("phraseIndex = %d, want 3", got)
	}
}
