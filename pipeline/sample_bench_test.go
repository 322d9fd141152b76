package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// sampleMessage is one line of the ABCD sample (testdata/abcd).
type sampleMessage struct {
	ID             string         `json:"id"`
	Text           string         `json:"text"`
	Expected       map[string]any `json:"expected"`
	ExpectedInText []string       `json:"expected_in_text"`
}

func loadSample(tb testing.TB) []sampleMessage {
	tb.Helper()
	f, err := os.Open("../testdata/abcd/messages.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []sampleMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m sampleMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatal(err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func loadCustomerSchema(tb testing.TB) *Schema {
	tb.Helper()
	raw, err := os.ReadFile("../schemas/customer_message.v1.json")
	if err != nil {
		tb.Fatal(err)
	}
	s, err := CompileSchema("customer_message", raw)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

var (
	sampleOrderID   = regexp.MustCompile(`\b[0-9]{10}\b`)
	sampleEmail     = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`)
	sampleAccountID = regexp.MustCompile(`\b[A-Z0-9]*[0-9][A-Z0-9]*[A-Z][A-Z0-9]*\b`)
)

// sampleRecord returns the record a good model would extract from m for
// schemas/customer_message.v1.json: the ground-truth values the text
// states, plus ids and e-mails the text holds that the sample leaves
// unlabelled, and null for the rest.
func sampleRecord(m sampleMessage) map[string]any {
	rec := map[string]any{}
	for _, k := range []string{"flow", "full_name", "account_id", "username", "email", "phone", "membership_level",
		"order_id", "zip_code", "street_address", "city", "state", "payment_method", "purchase_date", "refund_amount", "product_names"} {
		rec[k] = nil
	}
	rec["intent"] = "status"
	if v, ok := m.Expected["intent"]; ok {
		rec["intent"] = v
	}
	if v, ok := m.Expected["flow"]; ok {
		rec["flow"] = v
	}
	for _, k := range m.ExpectedInText {
		rec[k] = m.Expected[k]
	}
	if rec["order_id"] == nil {
		if id := sampleOrderID.FindString(m.Text); id != "" {
			rec["order_id"] = id
		}
	}
	if rec["email"] == nil {
		if e := sampleEmail.FindString(m.Text); e != "" {
			rec["email"] = e
		}
	}
	if rec["account_id"] == nil {
		for _, id := range sampleAccountID.FindAllString(m.Text, -1) {
			if len(id) == 10 {
				rec["account_id"] = id
				break
			}
		}
	}
	return rec
}

// sampleCase is one message with the replies of its calls.
type sampleCase struct {
	text          string
	first, repair string
	outcome       string
}

// sampleCases builds a call script for every message of the sample: the
// record as compact JSON; every 10th reply in a code fence with a
// sentence around it; every 10th (offset by 5) with an invented order id,
// which the repair call corrects.
func sampleCases(tb testing.TB) []sampleCase {
	tb.Helper()
	var out []sampleCase
	for i, m := range loadSample(tb) {
		rec := sampleRecord(m)
		good, err := json.Marshal(rec)
		if err != nil {
			tb.Fatal(err)
		}
		c := sampleCase{text: m.Text, first: string(good), repair: string(good)}
		switch i % 10 {
		case 0:
			c.first = "Here is the record:\n```json\n" + string(good) + "\n```"
		case 5:
			bad := map[string]any{}
			for k, v := range rec {
				bad[k] = v
			}
			bad["order_id"] = "5550123499"
			b, err := json.Marshal(bad)
			if err != nil {
				tb.Fatal(err)
			}
			c.first = string(b)
		}
		out = append(out, c)
	}
	return out
}

// sampleChat is a chat client stand-in that answers at once with the
// scripted reply of the current case: first for the extraction call,
// repair for the repair call.
type sampleChat struct{ c *sampleCase }

func (s *sampleChat) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	reply := s.c.first
	if len(req.Messages) > 2 {
		reply = s.c.repair
	}
	return openai.ChatCompletionResponse{
		Choices: []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: reply}, FinishReason: "stop"}},
		Usage:   openai.Usage{PromptTokens: 1500, CompletionTokens: 80},
	}, nil
}

type sampleBench struct {
	cases []sampleCase
	chat  *sampleChat
	ext   *Extractor
	in    Input
}

func newSampleBench(tb testing.TB) *sampleBench {
	tb.Helper()
	p, err := LoadPrompt("extract.v1")
	if err != nil {
		tb.Fatal(err)
	}
	sb := &sampleBench{cases: sampleCases(tb), chat: &sampleChat{}}
	sb.ext = NewExtractor(sb.chat, ExtractorConfig{Model: "m", MaxCompletionTokens: 512, ContextWindowTokens: 32768,
		Budget: Budget{MaxTokens: 16000, MaxCostUSD: 1}, Price: Price{InputPerMTok: 0.15, OutputPerMTok: 0.6}})
	sb.in = Input{Schema: loadCustomerSchema(tb), Prompt: p, Repair: RepairRegenerate}
	for i := range sb.cases {
		res, err := sb.run(i)
		if err != nil {
			tb.Fatal(err)
		}
		sb.cases[i].outcome = res.Outcome
	}
	return sb
}

func (sb *sampleBench) run(i int) (*Result, error) {
	c := &sb.cases[i]
	sb.chat.c = c
	in := sb.in
	in.Text = c.text
	return sb.ext.Process(context.Background(), in)
}

// BenchmarkExtractorProcess measures Extractor.Process per message over
// the real ABCD sample with an instant in-process model: request building,
// parsing, validation, grounding and the repair call of one message in
// ten. An op is one message.
func BenchmarkExtractorProcess(b *testing.B) {
	sb := newSampleBench(b)
	counts := map[string]int{}
	for _, c := range sb.cases {
		counts[c.outcome]++
	}
	b.Logf("outcomes over %d messages: %v", len(sb.cases), counts)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		res, err := sb.run(i)
		if err != nil || res.Outcome != sb.cases[i].outcome {
			b.Fatalf("message %d: %v %v", i, err, res.Errors)
		}
		if i++; i == len(sb.cases) {
			i = 0
		}
	}
}

// parsedRecord is a valid record of the sample with its message text.
type parsedRecord struct {
	inst any
	text string
}

// sampleRecords parses the sample's valid records (the repaired replies).
func sampleRecords(b *testing.B) []parsedRecord {
	b.Helper()
	var out []parsedRecord
	for _, c := range sampleCases(b) {
		rep, errs := ParseReply(c.repair)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		out = append(out, parsedRecord{rep.Object, c.text})
	}
	return out
}

// BenchmarkValidate measures Schema.Validate per message over the sample's
// records. An op is one message.
func BenchmarkValidate(b *testing.B) {
	s := loadCustomerSchema(b)
	items := sampleRecords(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Validate(items[i].inst, items[i].text)
		if i++; i == len(items) {
			i = 0
		}
	}
}

// BenchmarkGround measures Schema.Ground per message over the sample's
// records. An op is one message.
func BenchmarkGround(b *testing.B) {
	s := loadCustomerSchema(b)
	items := sampleRecords(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Ground(items[i].inst, items[i].text)
		if i++; i == len(items) {
			i = 0
		}
	}
}

// BenchmarkParseReply measures ParseReply per reply over the sample's
// first replies (one in ten fenced). An op is one reply.
func BenchmarkParseReply(b *testing.B) {
	cases := sampleCases(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, errs := ParseReply(cases[i].first); len(errs) > 0 {
			b.Fatal(errs)
		}
		if i++; i == len(cases) {
			i = 0
		}
	}
}
