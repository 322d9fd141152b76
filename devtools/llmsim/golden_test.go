package llmsim

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

// sampleMessagesFile holds the sample customer messages (JSON lines with
// "id" and "text").
const sampleMessagesFile = "../../testdata/abcd/messages.jsonl"

// goldenReplies pins every reply the simulator gives to the sample
// messages, sent as the worker sends them, per schema and request mode: a
// SHA-256 over the replies to the extraction calls (attempt 1) and one
// over the replies to the repair calls (attempt 2). A reply counts with
// its status, its X-Llmsim-* headers and its body, less the call counter
// in the reply id and the created time.
//
// The plain rows send every message with the default configuration (seed
// 1, default fault rates, no latency). Two more kinds of row send every
// fourth message: "annotated" sends the schema with its x- annotations
// (x-keywords, x-hint), which the worker strips; "faults" multiplies every
// fault rate by ten, so many more replies are faults and repairs.
//
// The extraction digests depend only on the simulator, the prompt
// templates and the schemas. The repair digests also depend on how the
// pipeline validates a reply and words its repair turn: a change there
// changes them too.
var goldenReplies = []struct {
	schema, mode, variant string
	step                  int // every step-th message
	extract, calls        int // extraction calls, all calls
	extractSHA            string
	repairSHA             string
}{
	{"customer_message", pipeline.ModeResponseFormat, "", 1, 1735, 1754,
		"c18808ca869f2e29277f703523338785e59afa4fd9c98b3071f701308f462e3f",
		"8947428e8b091a03f88a0996764fd7e1dc1d5e67d877c750e4582ed6b2f13838"},
	{"customer_message", pipeline.ModeTools, "", 1, 1735, 1754,
		"f2090341a71f729391d6046c303804864ba4c2ef12f859a017d45e6614d5405d",
		"33535e9efd534712b002b7f90c79356086c5fb4903dc88d308daad33edb944a2"},
	{"return_request", pipeline.ModeResponseFormat, "", 1, 1735, 1754,
		"a74831a95d514c7dff0b10a10603142290ad78bbf71c215a23b5f0a377c64c13",
		"ea0022a527125fd325485ef90f3d952cb2260b807deacd5a4c85e22ce5d6535d"},
	{"return_request", pipeline.ModeTools, "", 1, 1735, 1754,
		"b98cf28b204bc64a70d3299b1cb23fba97e946f5a460cc5161e2f0bd4d43c68d",
		"baca37d044238128627d9f95511a25bd8fbb47f8e003dfdf0f05e77ae785a5c9"},
	{"customer_message", pipeline.ModeResponseFormat, "annotated", 4, 434, 440,
		"7fd6ca11512cd55e6618c61158e003c41b9ce84c982d5054be0896c43d34566e",
		"325cf3a7dd0ae122b5cf5911d4bb4ba3a9467d78e81d39b6a36a3b01cd6c8b63"},
	{"return_request", pipeline.ModeTools, "annotated", 4, 434, 440,
		"cdf0664357407b1295e152cd5f0b47eaf5a6983297f5ae6e27bea11cb827ae5c",
		"160f2bbbf9ce0ac89f754b0ab1f457ee537456602a680eac4e4cae6fd7b8a367"},
	{"customer_message", pipeline.ModeTools, "faults", 4, 434, 471,
		"e7c4b860f05854738f532191066056c95eaff861a1e69828fd1167e79f58ca6a",
		"72e2dd8a1fc50f9c043d32fad02fa96031c9bbd925cff0547bb03e0c2c7eb8b4"},
	{"return_request", pipeline.ModeResponseFormat, "faults", 4, 434, 471,
		"799ad57d890314a5974202c43021deeb058bebe91dd1880e41526e46ddd9798a",
		"5cdb2186db1c65b7bfa7117462416c157edc491b26f32a98028887566e8d333c"},
}

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

func loadSampleMessages(tb testing.TB) []sampleMessage {
	tb.Helper()
	f, err := os.Open(sampleMessagesFile)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []sampleMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		var m sampleMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatalf("%s: %v", sampleMessagesFile, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

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

// hashReply writes the stable parts of a reply to h.
func hashReply(h hash.Hash, rec *httptest.ResponseRecorder) {
	fmt.Fprintf(h, "status %d\n", rec.Code)
	for _, k := range []string{"Content-Type", "X-Llmsim-Try", "X-Llmsim-Attempt", "X-Llmsim-Fault",
		"X-Llmsim-Fault-Path", "X-Llmsim-Fixed"} {
		if v, ok := rec.Header()[k]; ok {
			fmt.Fprintf(h, "%s: %q\n", k, v)
		}
	}
	body := replyCounterRE.ReplaceAll(rec.Body.Bytes(), []byte(`$1"`))
	body = replyCreatedRE.ReplaceAll(body, []byte(`"created":0`))
	fmt.Fprintf(h, "body %d\n", len(body))
	h.Write(body)
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
// default fault rates, no latency) and checks the digests of its replies
// against goldenReplies. Any change to a reply the simulator gives fails
// it.
func TestGoldenReplies(t *testing.T) {
	t.Parallel()
	msgs := loadSampleMessages(t)
	cfg := config.Default()
	loaded := loadGoldenSchemas(t, cfg)
	for _, g := range goldenReplies {
		name := g.schema + "/" + g.mode
		if g.variant != "" {
			name += "/" + g.variant
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, ok := loaded[g.schema]
			if !ok {
				t.Fatalf("schema %s is not configured", g.schema)
			}
			simCfg := cfg.Simulator
			if g.variant == "faults" {
				simCfg = tenfoldFaults(simCfg)
			}
			sim := New(simCfg, nil)
			extractH, repairH := sha256.New(), sha256.New()
			extract, calls := 0, 0
			tr := handlerTransport{h: sim, record: func(rec *httptest.ResponseRecorder) {
				calls++
				h := repairH
				if rec.Header().Get("X-Llmsim-Attempt") == "1" {
					h = extractH
					extract++
				}
				hashReply(h, rec)
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
			for i := 0; i < len(msgs); i += g.step {
				m := msgs[i]
				_, err := ext.Process(context.Background(), pipeline.Input{
					Text: m.Text, Schema: sc.schema, Prompt: sc.prompt, Repair: sc.repair,
				})
				var te *pipeline.TransportError
				if err != nil && !errors.As(err, &te) {
					t.Fatalf("message %s: %v", m.ID, err)
				}
			}
			gotExtract := hex.EncodeToString(extractH.Sum(nil))
			gotRepair := hex.EncodeToString(repairH.Sum(nil))
			if extract != g.extract || calls != g.calls || gotExtract != g.extractSHA || gotRepair != g.repairSHA {
				t.Errorf("replies changed:\n got  %d, %d, %q, %q\n want %d, %d, %q, %q",
					extract, calls, gotExtract, gotRepair, g.extract, g.calls, g.extractSHA, g.repairSHA)
			}
		})
	}
}
