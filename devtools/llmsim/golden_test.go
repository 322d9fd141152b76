package llmsim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

// sampleMessagesFile holds the sample customer messages (JSON lines with
// "id" and "text").
const sampleMessagesFile = "../../testdata/abcd/messages.jsonl"

// goldenReplies lists the golden files of TestGoldenReplies, which pin
// every reply the simulator gives to the golden sample messages, sent as
// the worker sends them, per schema and request mode. Each file
// (testdata/golden/<schema>_<mode>[_<variant>].txt, see writeGolden) has
// one line per reply to an extraction call (attempt 1), with its status,
// its X-Llmsim-* headers and a digest of its body, and every reply to a
// repair call (attempt 2) in full. A reply's body counts less the call
// counter in the reply id and the created time.
//
// The golden sample messages are the ones goldenMessagesFile lists, a
// few hundred of the 1,735 sample messages: every behaviour the rows show
// on all 1,735 (each fault and where it lands, each repair outcome, each
// field found or not, the shape of each value found, each enum value) on
// at least one of them, and every 25th message besides (TestGoldenSelect
// picks them; go test -run TestGoldenSelect -select rewrites the list).
//
// The plain rows use the default configuration (seed 1, default fault
// rates, no latency). Two more kinds of row: "annotated" sends the schema
// with its x- annotations (x-keywords, x-hint), which the worker strips;
// "faults" multiplies every fault rate by ten, so many more replies are
// faults and repairs.
//
// The extraction replies depend only on the simulator, the prompt
// templates and the schemas. The repair replies also depend on how the
// pipeline validates a reply and words its repair turn: a change there
// changes them too. After such a change, look at the diff the test prints
// and, if it is what the change should do, rewrite the files:
//
//	go test ./devtools/llmsim -run TestGoldenReplies -update
var goldenReplies = []goldenRow{
	{"customer_message", pipeline.ModeResponseFormat, ""},
	{"customer_message", pipeline.ModeTools, ""},
	{"return_request", pipeline.ModeResponseFormat, ""},
	{"return_request", pipeline.ModeTools, ""},
	{"customer_message", pipeline.ModeResponseFormat, "annotated"},
	{"return_request", pipeline.ModeTools, "annotated"},
	{"customer_message", pipeline.ModeTools, "faults"},
	{"return_request", pipeline.ModeResponseFormat, "faults"},
}

// goldenRow is one golden file's schema, request mode and variant ("",
// "annotated" or "faults").
type goldenRow struct {
	schema, mode, variant string
}

// goldenMessagesFile lists the ids of the golden sample messages, one a
// line; lines starting with # are comments.
const goldenMessagesFile = "testdata/golden/messages.txt"

// goldenMessages returns the messages of msgs that goldenMessagesFile
// lists, in msgs' order.
func goldenMessages(tb testing.TB, msgs []sampleMessage) []sampleMessage {
	tb.Helper()
	b, err := os.ReadFile(goldenMessagesFile)
	if err != nil {
		tb.Fatalf("%v (go test -run TestGoldenSelect -select writes it)", err)
	}
	ids := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			ids[line] = true
		}
	}
	var out []sampleMessage
	for _, m := range msgs {
		if ids[m.ID] {
			out = append(out, m)
			delete(ids, m.ID)
		}
	}
	if len(ids) > 0 {
		tb.Fatalf("%s lists %d ids that are not in %s", goldenMessagesFile, len(ids), sampleMessagesFile)
	}
	return out
}

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with the replies the tests get")

// annotatedClient sends the schema with its x- annotations in place of
// the one the extractor sends.
type annotatedClient struct {
	pipeline.ChatClient
	raw json.RawMessage
}

func (c annotatedClient) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	if rf := req.ResponseFormat; rf != nil && rf.JSONSchema != nil {
		js := *rf.JSONSchema
		js.Schema = c.raw
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: rf.Type, JSONSchema: &js}
	}
	if len(req.Tools) == 1 && req.Tools[0].Function != nil {
		fn := *req.Tools[0].Function
		fn.Parameters = c.raw
		req.Tools = []openai.Tool{{Type: req.Tools[0].Type, Function: &fn}}
	}
	return c.ChatClient.CreateChatCompletion(ctx, req)
}

// tenfoldFaults returns cfg with every fault rate multiplied by ten.
func tenfoldFaults(cfg config.Simulator) config.Simulator {
	for _, r := range []*float64{&cfg.InvalidJSONRate, &cfg.FencedRate, &cfg.ProseRate, &cfg.WrongTypeRate,
		&cfg.MissingRequiredRate, &cfg.UngroundedRate, &cfg.TruncatedRate} {
		*r *= 10
	}
	return cfg
}

// sampleMessage is one line of the sample messages file.
type sampleMessage struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// loadSampleMessages returns the sample messages, a copy of its own: the
// file is read once per test binary (sampleMessages), where each of the
// tests that use it read it again before.
func loadSampleMessages(tb testing.TB) []sampleMessage {
	tb.Helper()
	msgs, err := sampleMessages()
	if err != nil {
		tb.Fatal(err)
	}
	return slices.Clone(msgs)
}

var sampleMessages = sync.OnceValues(func() ([]sampleMessage, error) {
	f, err := os.Open(sampleMessagesFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sampleMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		var m sampleMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s: %v", sampleMessagesFile, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
})

// handlerTransport serves requests with an http.Handler in the same
// process, and passes each reply to record.
type handlerTransport struct {
	h      http.Handler
	record func(*httptest.ResponseRecorder)
}

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if t.record != nil {
		t.record(rec)
	}
	return rec.Result(), nil
}

// Parts of a reply that differ from run to run: the call counter ending
// the reply id, and the created time.
var (
	replyCounterRE = regexp.MustCompile(`("id":"chatcmpl-sim-[0-9a-f]{12})-[0-9]+"`)
	replyCreatedRE = regexp.MustCompile(`"created":[0-9]+`)
)

// goldenHeaders are the reply headers the golden files hold.
var goldenHeaders = []string{"Content-Type", "X-Llmsim-Try", "X-Llmsim-Attempt", "X-Llmsim-Fault",
	"X-Llmsim-Fault-Path", "X-Llmsim-Fixed"}

// goldenReply is the stable part of one reply, to the call of one message.
type goldenReply struct {
	message string // the sample message's id
	status  int
	header  http.Header
	body    []byte // less the call counter and the created time
}

func newGoldenReply(message string, rec *httptest.ResponseRecorder) goldenReply {
	body := replyCounterRE.ReplaceAll(rec.Body.Bytes(), []byte(`$1"`))
	body = replyCreatedRE.ReplaceAll(body, []byte(`"created":0`))
	return goldenReply{message: message, status: rec.Code, header: rec.Header().Clone(), body: body}
}

// usualHeaders are header values most replies have: a reply's line
// leaves out a header with its usual value, and writes one missing as
// name=-.
var usualHeaders = map[string]string{"Content-Type": "application/json", "X-Llmsim-Try": "1", "X-Llmsim-Fault": "none"}

// summary is the reply's line: message, status, headers (but the usual
// values and skip), and the first 16 hex digits of the body's SHA-256
// with its length.
func (r goldenReply) summary(skip string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d", r.message, r.status)
	for _, k := range goldenHeaders {
		name := strings.TrimPrefix(k, "X-Llmsim-")
		v, ok := r.header[k]
		usual, hasUsual := usualHeaders[k]
		switch {
		case k == skip:
		case !ok && hasUsual:
			fmt.Fprintf(&b, " %s=-", name)
		case !ok:
		case hasUsual && len(v) == 1 && v[0] == usual:
		default:
			fmt.Fprintf(&b, " %s=%q", name, strings.Join(v, ","))
		}
	}
	sum := sha256.Sum256(r.body)
	fmt.Fprintf(&b, " body=%x/%d", sum[:8], len(r.body))
	return b.String()
}

// writeFull writes the reply's summary, then its body indented and, for
// readers of a diff, each message content or tool call arguments that
// hold JSON, indented too.
func (r goldenReply) writeFull(w *bytes.Buffer) {
	fmt.Fprintf(w, "=== %s\n", r.summary(""))
	var body bytes.Buffer
	if json.Indent(&body, r.body, "", "  ") != nil {
		w.Write(r.body)
		w.WriteString("\n")
		return
	}
	body.WriteTo(w)
	w.WriteString("\n")
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
	if json.Unmarshal(r.body, &reply) != nil {
		return
	}
	inner := func(label, s string) {
		var b bytes.Buffer
		if json.Indent(&b, []byte(s), "", "  ") == nil {
			fmt.Fprintf(w, "%s:\n%s\n", label, b.Bytes())
		}
	}
	for _, c := range reply.Choices {
		inner("content", c.Message.Content)
		for _, tc := range c.Message.ToolCalls {
			inner("arguments", tc.Function.Arguments)
		}
	}
}

// goldenFile is the text of one row's golden file.
func goldenFile(title string, extract, repair []goldenReply) []byte {
	var w bytes.Buffer
	fmt.Fprintf(&w, "# %s\n# Written by go test ./devtools/llmsim -run TestGoldenReplies -update; see goldenReplies.\n", title)
	fmt.Fprintf(&w, "\n## %d replies to extraction calls (X-Llmsim-Attempt 1): message, status, X-Llmsim- headers, body SHA-256/bytes\n", len(extract))
	fmt.Fprintf(&w, "## Headers with their usual values (Content-Type application/json, Try 1, Fault none) are left out.\n\n")
	for _, r := range extract {
		w.WriteString(r.summary("X-Llmsim-Attempt"))
		w.WriteString("\n")
	}
	fmt.Fprintf(&w, "\n## %d replies to repair calls, in full\n\n", len(repair))
	for _, r := range repair {
		r.writeFull(&w)
	}
	return w.Bytes()
}

// checkGolden compares got with the golden file at path, or with -update
// rewrites the file.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")); diff != "" {
		const most = 200
		if lines := strings.SplitAfter(diff, "\n"); len(lines) > most {
			diff = strings.Join(lines[:most], "") + fmt.Sprintf("... and %d more lines: -update and git diff show them all\n", len(lines)-most)
		}
		t.Errorf("replies differ from %s (-want +got):\n%s\nIf the change is meant, rewrite the file: go test ./devtools/llmsim -run TestGoldenReplies -update", path, diff)
	}
}

// goldenSchema is one configured schema with its prompt and repair
// strategy, as the worker loads it.
type goldenSchema struct {
	schema *pipeline.Schema
	prompt *pipeline.Prompt
	repair string
}

func loadGoldenSchemas(tb testing.TB, cfg *config.Config) map[string]goldenSchema {
	tb.Helper()
	out := map[string]goldenSchema{}
	for _, sc := range cfg.Schemas {
		s, err := pipeline.LoadSchema(schemas.FS, sc.ID, sc.File)
		if err != nil {
			tb.Fatal(err)
		}
		p, err := pipeline.LoadPrompt(sc.Prompt)
		if err != nil {
			tb.Fatal(err)
		}
		out[sc.ID] = goldenSchema{schema: s, prompt: p, repair: sc.Repair}
	}
	return out
}

// TestGoldenReplies runs every sample message through the pipeline's
// extractor against a simulator with the default configuration (seed 1,
// default fault rates, no latency) and checks its replies against the
// golden files (see goldenReplies). Any change to a reply the simulator
// gives fails it, with a diff of what changed.
func TestGoldenReplies(t *testing.T) {
	t.Parallel()
	msgs := goldenMessages(t, loadSampleMessages(t))
	cfg := config.Default()
	loaded := loadGoldenSchemas(t, cfg)
	for _, g := range goldenReplies {
		t.Run(g.name(), func(t *testing.T) {
			t.Parallel()
			extract, repair := g.run(t, cfg, loaded, msgs)
			title := fmt.Sprintf("Replies of the simulator to the golden sample messages (%s, the %d listed in %s), schema %s, request mode %s",
				sampleMessagesFile, len(msgs), goldenMessagesFile, g.schema, g.mode)
			if g.variant != "" {
				title += ", " + g.variant
			}
			checkGolden(t, filepath.Join("testdata", "golden", strings.ReplaceAll(g.name(), "/", "_")+".txt"), goldenFile(title, extract, repair))
		})
	}
}

// name is the row's subtest name, schema/mode[/variant].
func (g goldenRow) name() string {
	name := g.schema + "/" + g.mode
	if g.variant != "" {
		name += "/" + g.variant
	}
	return name
}

// run sends msgs through the pipeline's extractor against a simulator
// configured for the row, and returns the replies to the extraction calls
// and to the repair calls.
func (g goldenRow) run(t *testing.T, cfg *config.Config, loaded map[string]goldenSchema, msgs []sampleMessage) (extract, repair []goldenReply) {
	t.Helper()
	sc, ok := loaded[g.schema]
	if !ok {
		t.Fatalf("schema %s is not configured", g.schema)
	}
	simCfg := cfg.Simulator
	if g.variant == "faults" {
		simCfg = tenfoldFaults(simCfg)
	}
	sim := New(simCfg, nil)
	var current string // the message being extracted
	tr := handlerTransport{h: sim, record: func(rec *httptest.ResponseRecorder) {
		r := newGoldenReply(current, rec)
		if rec.Header().Get("X-Llmsim-Attempt") == "1" {
			extract = append(extract, r)
		} else {
			repair = append(repair, r)
		}
	}}
	oc := openai.DefaultConfig("test")
	oc.BaseURL = "http://llmsim.test/v1"
	oc.HTTPClient = &http.Client{Transport: tr}
	var client pipeline.ChatClient = openai.NewClientWithConfig(oc)
	if g.variant == "annotated" {
		client = annotatedClient{ChatClient: client, raw: sc.schema.Raw}
	}
	lc := cfg.LLM
	ext := pipeline.NewExtractor(client, pipeline.ExtractorConfig{
		Model: lc.Model, RequestMode: g.mode, MaxCompletionTokens: lc.MaxCompletionTokens,
		ContextWindowTokens: lc.ContextWindowTokens, Timeout: lc.Timeout,
		Budget: pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
	})
	for _, m := range msgs {
		current = m.ID
		_, err := ext.Process(context.Background(), pipeline.Input{
			Text: m.Text, Schema: sc.schema, Prompt: sc.prompt, Repair: sc.repair,
		})
		var te *pipeline.TransportError
		if err != nil && !errors.As(err, &te) {
			t.Fatalf("message %s: %v", m.ID, err)
		}
	}
	return extract, repair
}
