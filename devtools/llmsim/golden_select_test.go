package llmsim

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/extractq/extractq/config"
)

var selectGolden = flag.Bool("select", false, "TestGoldenSelect: rewrite "+goldenMessagesFile+" from the replies to every sample message")

// goldenStride is how often TestGoldenSelect takes a message besides the
// ones that show a behaviour first: every goldenStride-th.
const goldenStride = 25

// TestGoldenSelect picks the golden sample messages (goldenMessagesFile)
// with -select; without it, it is skipped: it is the generator of a
// test's input, not a test. It sends all 1,735 sample messages through
// every row of goldenReplies, lists the behaviours each message's replies
// show (replyTraits), and takes, greedily, the message showing the most
// behaviours no message taken shows yet, until every behaviour seen is
// shown; then every goldenStride-th message besides. A simulator change
// that alters replies anywhere thus alters some golden one, unless it
// alters only values of a shape, on a field, in a mode no golden message
// has.
func TestGoldenSelect(t *testing.T) {
	if !*selectGolden {
		t.Skip("rewrites " + goldenMessagesFile + " with -select")
	}
	msgs := loadSampleMessages(t)
	cfg := config.Default()
	loaded := loadGoldenSchemas(t, cfg)
	traits := map[string]map[string]bool{} // message -> its traits
	for _, m := range msgs {
		traits[m.ID] = map[string]bool{}
	}
	values := map[string]map[string]bool{} // row and path -> string values seen
	type rowReplies struct {
		row     goldenRow
		replies []goldenReply
	}
	var all []rowReplies
	for _, g := range goldenReplies {
		extract, repair := g.run(t, cfg, loaded, msgs)
		all = append(all, rowReplies{g, append(extract, repair...)})
		for _, r := range append(extract, repair...) {
			for path, v := range replyLeaves(r) {
				if s, ok := v.(string); ok {
					k := g.name() + " " + path
					if values[k] == nil {
						values[k] = map[string]bool{}
					}
					values[k][s] = true
				}
			}
		}
	}
	text := map[string]string{}
	for _, m := range msgs {
		text[m.ID] = m.Text
	}
	for _, rr := range all {
		for _, r := range rr.replies {
			for tr := range replyTraits(rr.row.name(), r, text[r.message], values) {
				traits[r.message][tr] = true
			}
		}
	}

	uncovered := map[string]bool{}
	for _, ts := range traits {
		for tr := range ts {
			uncovered[tr] = true
		}
	}
	nTraits := len(uncovered)
	picked := map[string]bool{}
	for len(uncovered) > 0 {
		best, bestN := "", 0
		for _, m := range msgs { // in file order, so ties go to the first
			n := 0
			for tr := range traits[m.ID] {
				if uncovered[tr] {
					n++
				}
			}
			if n > bestN {
				best, bestN = m.ID, n
			}
		}
		picked[best] = true
		for tr := range traits[best] {
			delete(uncovered, tr)
		}
	}
	byTraits := len(picked)
	for i := 0; i < len(msgs); i += goldenStride {
		picked[msgs[i].ID] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# The golden sample messages of TestGoldenReplies: %d of the %d in %s.\n", len(picked), len(msgs), sampleMessagesFile)
	fmt.Fprintf(&b, "# %d show between them each of the %d behaviours the replies to all %d show (replyTraits);\n", byTraits, nTraits, len(msgs))
	fmt.Fprintf(&b, "# the rest are every %dth message. Written by go test ./devtools/llmsim -run TestGoldenSelect -select.\n", goldenStride)
	for _, m := range msgs {
		if picked[m.ID] {
			b.WriteString(m.ID + "\n")
		}
	}
	if err := os.WriteFile(goldenMessagesFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages: %d for %d behaviours, and every %dth", len(picked), byTraits, nTraits, goldenStride)
}

// replyTraits lists the behaviours one reply of row to the message text
// shows, each a string naming the row: its status and golden headers (the
// fault, where it lands, what a repair fixed), whether it is a repair, and
// for the record it carries (the message content or the tool call's
// arguments), each field's kind and the shape of its value (valueShape);
// the value itself for a string field with few values (an enum: at most
// 60 seen); and, for a value found in the text, how the words before it
// there lead to it (gapKind: "is", "was", "are", a colon or equals sign,
// or neither), so that each way the simulator tells a value is a field's
// is on some golden message.
func replyTraits(row string, r goldenReply, text string, values map[string]map[string]bool) map[string]bool {
	out := map[string]bool{}
	add := func(parts ...string) { out[row+" "+strings.Join(parts, " ")] = true }
	attempt := r.header.Get("X-Llmsim-Attempt")
	add("status", strconv.Itoa(r.status), "attempt", attempt)
	for _, k := range goldenHeaders {
		if v := r.header.Values(k); len(v) > 0 && k != "X-Llmsim-Attempt" {
			add("attempt", attempt, k, strings.Join(v, ","))
		}
	}
	leaves := replyLeaves(r)
	if leaves == nil {
		add("attempt", attempt, "no record")
	}
	for path, v := range leaves {
		switch v := v.(type) {
		case string:
			add("attempt", attempt, path, "shape", valueShape(v))
			if len(values[row+" "+path]) <= 60 {
				add("attempt", attempt, path, "value", v)
			}
			if i := strings.Index(text, v); v != "" && i >= 0 {
				add("attempt", attempt, path, "after", gapKind(text[:i]))
			}
		default:
			add("attempt", attempt, path, fmt.Sprintf("%T", v))
		}
	}
	return out
}

// replyLeaves returns the leaves of the record a reply carries, by JSON
// pointer (array indexes as *), or nil when it carries none that parses.
func replyLeaves(r goldenReply) map[string]any {
	var reply struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				ToolCalls []struct {
					Function struct {
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(r.body, &reply) != nil || len(reply.Choices) == 0 {
		return nil
	}
	m := reply.Choices[0].Message
	text := m.Content
	if len(m.ToolCalls) > 0 {
		text = m.ToolCalls[0].Function.Arguments
	}
	var rec any
	if json.Unmarshal([]byte(text), &rec) != nil {
		return nil
	}
	out := map[string]any{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(path+"/"+k, v[k])
			}
		case []any:
			if len(v) == 0 {
				out[path] = "[]"
			}
			for _, e := range v {
				walk(path+"/*", e)
			}
		default:
			out[path] = v
		}
	}
	walk("", rec)
	return out
}

// valueShape is a string value's shape: each run of letters is a, each
// digit 9, other characters kept (a run of spaces as one), capped at 40
// characters. "Albert Sanders" is "a a", "(720) 986-4183" is
// "(999) 999-9999".
func valueShape(s string) string {
	var b strings.Builder
	prev := rune(0)
	for _, c := range s {
		var x rune
		switch {
		case unicode.IsLetter(c):
			x = 'a'
		case unicode.IsDigit(c):
			x = '9'
		case unicode.IsSpace(c):
			x = ' '
		default:
			x = c
		}
		if (x == 'a' || x == ' ') && x == prev {
			continue
		}
		b.WriteRune(x)
		prev = x
		if b.Len() >= 40 {
			b.WriteString("…")
			break
		}
	}
	return b.String()
}

// gapKind says how the text before a value leads to it: the copula
// ending it ("is", "was", "are"), ":" when it ends with a colon or an
// equals sign, "start" at the start of a line, else "other".
func gapKind(s string) string {
	line := strings.ToLower(s[strings.LastIndexByte(s, '\n')+1:])
	f := strings.Fields(line)
	switch {
	case len(f) == 0:
		return "start"
	case strings.HasSuffix(f[len(f)-1], ":") || strings.HasSuffix(f[len(f)-1], "="):
		return ":"
	}
	switch w := f[len(f)-1]; w {
	case "is", "was", "are":
		return w
	}
	return "other"
}
