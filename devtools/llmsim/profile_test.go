package llmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/config"
)

// shapeOf lists every JSON path of v with the JSON type there, ignoring
// values: "choices[].message.content: string". Elements of an array share
// the path "[]".
func shapeOf(v any) map[string]string {
	out := map[string]string{}
	var walk func(v any, p string)
	walk = func(v any, p string) {
		switch t := v.(type) {
		case map[string]any:
			out[p] = "object"
			for k, c := range t {
				walk(c, p+"."+k)
			}
		case []any:
			out[p] = "array"
			for _, c := range t {
				walk(c, p+"[]")
			}
		case nil:
			out[p] = "null"
		case string:
			out[p] = "string"
		case float64:
			out[p] = "number"
		case bool:
			out[p] = "boolean"
		}
	}
	walk(v, "$")
	return out
}

// sameShape fails t unless got has the key structure of want: the same
// paths with the same JSON types.
func sameShape(t *testing.T, what string, want, got []byte) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: fixture body: %v", what, err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: reply %s is not JSON: %v", what, got, err)
	}
	ws, gs := shapeOf(w), shapeOf(g)
	// tool call arguments sent as an object hold the record: values, whose
	// keys are the request schema's, not the server's
	const args = "$.choices[].message.tool_calls[].function.arguments."
	for _, m := range []map[string]string{ws, gs} {
		for p := range m {
			if strings.HasPrefix(p, args) {
				delete(m, p)
			}
		}
	}
	var diffs []string
	for p, typ := range ws {
		if gs[p] != typ {
			diffs = append(diffs, fmt.Sprintf("%s: fixture %s, simulator %q", p, typ, gs[p]))
		}
	}
	for p, typ := range gs {
		if _, ok := ws[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %s, not in the fixture", p, typ))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: the reply's shape differs from the fixture's:\n  %s\nreply: %s", what, strings.Join(diffs, "\n  "), got)
	}
}

// profileRequest is an extraction request for the test schema, in the
// form a request mode sends it.
func profileRequest(t *testing.T, text string, tools bool, edit func(map[string]any)) []byte {
	t.Helper()
	req := map[string]any{
		"model":                 DefaultModel,
		"max_completion_tokens": 1024,
		"max_tokens":            1024,
		"messages": []any{
			map[string]any{"role": "system", "content": "You extract one structured record."},
			map[string]any{"role": "user", "content": userTurn(text)},
		},
	}
	schema := json.RawMessage(testSchema)
	if tools {
		req["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "record", "parameters": schema, "strict": true}}}
		req["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": "record"}}
	} else {
		req["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{
			"name": "customer_message", "schema": schema, "strict": true}}
	}
	if edit != nil {
		edit(req)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func profileConfig(p Profile) config.Simulator {
	return config.Simulator{Profile: string(p), Seed: 1, RepairFixRate: 1}
}

// TestProfileFixtures checks every fixture of every profile against the
// simulator under that profile: each fixture names its source, and the
// simulator's reply for the fixture's case has the fixture's keys and
// types (values ignored), its status, and for an error its error shape.
func TestProfileFixtures(t *testing.T) {
	for _, p := range Profiles[1:] {
		fs, err := Fixtures(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) == 0 {
			t.Fatalf("%s: no fixtures", p)
		}
		for name, fx := range fs {
			t.Run(string(p)+"/"+name, func(t *testing.T) {
				src := fx.Source
				if src["commit"] == "" && src["date"] == "" && src["url"] == "" {
					t.Errorf("source %v names no commit, date or URL", src)
				}
				if src["repo"] == "" && src["url"] == "" {
					t.Errorf("source %v names no repository or URL", src)
				}
				cfg := profileConfig(p)
				var body []byte
				outage := false
				switch name {
				case "content", "cached_tokens":
					body = profileRequest(t, textOrder, false, nil)
				case "tool_call":
					body = profileRequest(t, textOrder, true, nil)
				case "reasoning":
					cfg.Reasoning = true
					body = profileRequest(t, textOrder, false, nil)
				case "refusal":
					cfg.RefusalRate = 1
					body = profileRequest(t, textOrder, false, nil)
				case "content_filter":
					cfg.ContentFilterRate = 1
					body = profileRequest(t, textOrder, false, nil)
				case "rate_limited":
					cfg.RateLimitedRate = 1
					cfg.RequestsPerMinute, cfg.TokensPerMinute = 5000, 160000
					body = profileRequest(t, textOrder, false, nil)
				case "server_error":
					cfg.ServerErrorRate = 1
					body = profileRequest(t, textOrder, false, nil)
				case "server_busy", "unavailable":
					outage = true
					body = profileRequest(t, textOrder, false, nil)
				default: // a refused request: the fixture's own
					if len(fx.Request) == 0 {
						t.Fatalf("fixture %s has no request to send", name)
					}
					body = fx.Request
				}
				b := setup(t, cfg)
				if outage {
					b.sim.SetOutage(time.Minute)
				}
				resp, data := b.post(t, body)
				if resp.StatusCode != fx.Reply.Status {
					t.Fatalf("status %d, fixture %d; body %s", resp.StatusCode, fx.Reply.Status, data)
				}
				sameShape(t, string(p)+"/"+name, fx.Reply.Body, data)
				for k := range fx.Reply.Headers {
					if resp.Header.Get(k) == "" {
						t.Errorf("reply lacks header %s, which the fixture has", k)
					}
				}
				if fx.Reply.Status != http.StatusOK {
					var want, got map[string]map[string]any
					_ = json.Unmarshal(fx.Reply.Body, &want)
					_ = json.Unmarshal(data, &got)
					if strings.HasSuffix(name, "_refused") && got["error"]["message"] != want["error"]["message"] &&
						!strings.Contains(fx.Source["note"], "message is ours") {
						t.Errorf("error message %q, fixture %q", got["error"]["message"], want["error"]["message"])
					}
					if wt, ok := want["error"]["type"]; ok && got["error"]["type"] != wt && name != "rate_limited" {
						t.Errorf("error type %v, fixture %v", got["error"]["type"], wt)
					}
				}
			})
		}
	}
}

// TestProfileGenericHasNoFixtures keeps the generic profile the
// simulator's own shape: it must not be built from fixtures.
func TestProfileGenericHasNoFixtures(t *testing.T) {
	fs, err := Fixtures(ProfileGeneric)
	if err != nil || len(fs) != 0 {
		t.Fatalf("generic has fixtures %v (%v)", fs, err)
	}
	if _, err := ParseProfile("bedrock"); err == nil || !strings.Contains(err.Error(), "llamacpp") {
		t.Errorf("ParseProfile(bedrock) = %v, want an error naming the profiles", err)
	}
}

type chatReply struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Function struct {
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
			Refusal          *string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func decodeReply(t *testing.T, resp *http.Response, data []byte) chatReply {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	var r chatReply
	if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("reply %s: %v", data, err)
	}
	return r
}

// replyText is the reply's content, or its tool call's arguments as text.
func (r chatReply) replyText() string {
	m := r.Choices[0].Message
	if len(m.ToolCalls) > 0 {
		var s string
		if json.Unmarshal(m.ToolCalls[0].Function.Arguments, &s) == nil {
			return s
		}
		return string(m.ToolCalls[0].Function.Arguments)
	}
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// TestProfileEnforcement shows what a schema-enforcing server can and
// cannot prevent: under vllm every first-reply fault that breaks the
// structure is prevented (while generic sends it), an ungrounded id and
// a truncation still happen, and a repair gets the form of the schema it
// sent, whatever its words ask.
func TestProfileEnforcement(t *testing.T) {
	for _, tc := range []struct {
		fault Fault
		rate  func(*config.Simulator)
	}{
		{FaultInvalidJSON, func(c *config.Simulator) { c.InvalidJSONRate = 1 }},
		{FaultFenced, func(c *config.Simulator) { c.FencedRate = 1 }},
		{FaultProse, func(c *config.Simulator) { c.ProseRate = 1 }},
		{FaultWrongType, func(c *config.Simulator) { c.WrongTypeRate = 1 }},
		{FaultMissingRequired, func(c *config.Simulator) { c.MissingRequiredRate = 1 }},
		{FaultWrongEnum, func(c *config.Simulator) { c.WrongEnumRate = 1 }},
	} {
		for _, tools := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tools=%v", tc.fault, tools), func(t *testing.T) {
				gen, vllm := profileConfig(ProfileGeneric), profileConfig(ProfileVLLM)
				tc.rate(&gen)
				tc.rate(&vllm)
				body := profileRequest(t, textDispute, tools, nil)
				resp, data := setup(t, gen).post(t, body)
				if got := resp.Header.Get("X-Llmsim-Fault"); got != string(tc.fault) {
					t.Fatalf("generic: fault %q, want %q", got, tc.fault)
				}
				sd, _ := parseSchema([]byte(testSchema))
				if conforms(sd, decodeReply(t, resp, data).replyText()) {
					t.Fatalf("generic: the %s reply conforms; the test proves nothing", tc.fault)
				}
				resp, data = setup(t, vllm).post(t, body)
				r := decodeReply(t, resp, data)
				if got := resp.Header.Get("X-Llmsim-Fault"); got != string(FaultNone) {
					t.Errorf("vllm: fault %q sent under enforcement", got)
				}
				if got := resp.Header.Get("X-Llmsim-Prevented"); got != string(tc.fault) {
					t.Errorf("vllm: X-Llmsim-Prevented %q, want %q", got, tc.fault)
				}
				if !conforms(sd, r.replyText()) {
					t.Errorf("vllm: reply %q does not conform to the schema sent", r.replyText())
				}
			})
		}
	}

	t.Run("ungrounded still happens", func(t *testing.T) {
		cfg := profileConfig(ProfileVLLM)
		cfg.UngroundedRate = 1
		resp, data := setup(t, cfg).post(t, profileRequest(t, textDispute, false, nil))
		r := decodeReply(t, resp, data)
		if got := resp.Header.Get("X-Llmsim-Fault"); got != string(FaultUngrounded) {
			t.Fatalf("fault %q, want ungrounded", got)
		}
		sd, _ := parseSchema([]byte(testSchema))
		if !conforms(sd, r.replyText()) {
			t.Errorf("ungrounded reply %q does not conform", r.replyText())
		}
	})
	t.Run("truncation still happens", func(t *testing.T) {
		cfg := profileConfig(ProfileVLLM)
		cfg.TruncatedRate = 1
		resp, data := setup(t, cfg).post(t, profileRequest(t, textDispute, false, nil))
		if r := decodeReply(t, resp, data); r.Choices[0].FinishReason != "length" {
			t.Errorf("finish_reason %q, want length", r.Choices[0].FinishReason)
		}
	})
	t.Run("openai enforces only with strict", func(t *testing.T) {
		cfg := profileConfig(ProfileOpenAI)
		cfg.InvalidJSONRate = 1
		b := setup(t, cfg)
		body := profileRequest(t, textDispute, false, func(m map[string]any) {
			m["response_format"].(map[string]any)["json_schema"].(map[string]any)["strict"] = false
		})
		resp, _ := b.post(t, body)
		if got := resp.Header.Get("X-Llmsim-Fault"); got != string(FaultInvalidJSON) {
			t.Errorf("strict false: fault %q, want invalid_json", got)
		}
		resp, _ = b.post(t, profileRequest(t, textDispute, false, nil))
		if got := resp.Header.Get("X-Llmsim-Prevented"); got != string(FaultInvalidJSON) {
			t.Errorf("strict true: prevented %q, want invalid_json", got)
		}
	})

	// A patch repair: the previous reply lacks a required field; the
	// repair asks for a JSON Patch.
	prev := `{"intent":"manage_dispute_bill","full_name":"Albert Sanders","account_id":"U85ALFLG2Z","order_id":null,"items":[]}`
	repair := func(schema string) []byte {
		return profileRequest(t, textDispute, false, func(m map[string]any) {
			m["messages"] = append(m["messages"].([]any),
				map[string]any{"role": "assistant", "content": prev},
				map[string]any{"role": "user", "content": "Fix these errors with a JSON Patch (RFC 6902) array:\n/email: required"})
			m["response_format"].(map[string]any)["json_schema"].(map[string]any)["schema"] = json.RawMessage(schema)
		})
	}
	const patchSchema = `{"type":"object","additionalProperties":false,"required":["operations"],"properties":{"operations":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["op","path","value"],"properties":{"op":{"type":"string","enum":["add","remove","replace"]},"path":{"type":"string"},"value":{}}}}}}`
	t.Run("patch asked, record schema sent", func(t *testing.T) {
		resp, data := setup(t, profileConfig(ProfileGeneric)).post(t, repair(testSchema))
		if s := decodeReply(t, resp, data).replyText(); !strings.HasPrefix(s, "[") {
			t.Fatalf("generic: reply %s is not a patch array; the test proves nothing", s)
		}
		resp, data = setup(t, profileConfig(ProfileVLLM)).post(t, repair(testSchema))
		s := decodeReply(t, resp, data).replyText()
		doc := decode(t, s)
		if _, ok := doc["email"]; !ok {
			t.Errorf("vllm: reply %s is not the repaired record", s)
		}
	})
	t.Run("patch asked, patch schema sent", func(t *testing.T) {
		b := setup(t, profileConfig(ProfileVLLM))
		b.post(t, profileRequest(t, textDispute, false, nil)) // the extraction, with the record schema
		resp, data := b.post(t, repair(patchSchema))
		s := decodeReply(t, resp, data).replyText()
		var got struct {
			Operations []patchOp `json:"operations"`
		}
		if err := json.Unmarshal([]byte(s), &got); err != nil || len(got.Operations) != 1 || got.Operations[0].Path != "/email" {
			t.Errorf("vllm: reply %s is not a one-operation patch of /email (%v)", s, err)
		}
	})
}

// TestProfileStrictRefused shows openai refusing a strict schema outside
// the strict subset, naming the first offending place, and vllm, which
// has no strict mode, accepting it.
func TestProfileStrictRefused(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"object","additionalProperties":false,"properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"]}`,
			"Invalid schema for response_format 'customer_message': In context=(), 'required' is required to be supplied and to be an array including every key in properties. Missing 'b'."},
		{`{"type":"object","additionalProperties":false,"required":["a"],"properties":{"a":{"type":"object","properties":{"c":{"type":"string"}},"required":["c"]}}}`,
			"Invalid schema for response_format 'customer_message': In context=('properties', 'a'), 'additionalProperties' is required to be supplied and to be false."},
	} {
		body := profileRequest(t, textOrder, false, func(m map[string]any) {
			m["response_format"].(map[string]any)["json_schema"].(map[string]any)["schema"] = json.RawMessage(tc.schema)
		})
		resp, data := setup(t, profileConfig(ProfileOpenAI)).post(t, body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("openai: status %d, want 400: %s", resp.StatusCode, data)
		}
		if e := openAIError(t, data); e.Message != tc.want || e.Param == nil || *e.Param != "response_format" || e.Code != nil {
			t.Errorf("openai: error %+v, want message %q, param response_format, code null", e, tc.want)
		}
		if resp, data := setup(t, profileConfig(ProfileVLLM)).post(t, body); resp.StatusCode != http.StatusOK {
			t.Errorf("vllm: status %d, want 200 (strict is ignored): %s", resp.StatusCode, data)
		}
	}
}

// TestProfileCachedTokens shows the openai profile reporting a repeated
// prefix of 1,024 tokens and more in steps of 128, nothing below, and
// llama.cpp every token shared with the previous prompt.
func TestProfileCachedTokens(t *testing.T) {
	long := strings.Repeat("Follow the schema exactly; use null when the message does not say. ", 90) // ~6,000 code points
	body := func(text string) []byte {
		return profileRequest(t, text, false, func(m map[string]any) {
			m["messages"].([]any)[0].(map[string]any)["content"] = long
		})
	}
	cached := func(b *testBundle, text string) (int, int) {
		resp, data := b.post(t, body(text))
		r := decodeReply(t, resp, data)
		if r.Usage.PromptTokensDetails == nil {
			t.Fatalf("reply %s has no prompt_tokens_details", data)
		}
		return r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens
	}
	b := setup(t, profileConfig(ProfileOpenAI))
	if c, _ := cached(b, textOrder); c != 0 {
		t.Errorf("openai: first call reports %d cached tokens, want 0", c)
	}
	c, prompt := cached(b, textEmail)
	// the shared prefix is the schema, the system turn and the user turn's opening
	shared := commonPrefixRunes(promptTextOf(t, body(textOrder)), promptTextOf(t, body(textEmail))) / 4
	want := 1024 + (shared-1024)/128*128
	if shared < 1024 || c != want || c%128 != 0 || c > prompt {
		t.Errorf("openai: %d cached of %d prompt tokens, want %d (shared prefix %d tokens)", c, prompt, want, shared)
	}

	short := setup(t, profileConfig(ProfileOpenAI))
	small := func(text string) []byte { return profileRequest(t, text, false, nil) }
	short.post(t, small(textOrder))
	resp, data := short.post(t, small(textEmail))
	if r := decodeReply(t, resp, data); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("openai: a prompt under 1,024 tokens reports %d cached", r.Usage.PromptTokensDetails.CachedTokens)
	}

	lb := setup(t, profileConfig(ProfileLlamaCpp))
	cached(lb, textOrder)
	if c, _ := cached(lb, textEmail); c != shared {
		t.Errorf("llamacpp: %d cached tokens, want the shared prefix %d", c, shared)
	}

	resp, data = setup(t, profileConfig(ProfileVLLM)).post(t, body(textOrder))
	if r := decodeReply(t, resp, data); r.Usage.PromptTokensDetails != nil {
		t.Errorf("vllm: prompt_tokens_details %+v, want null", r.Usage.PromptTokensDetails)
	}
}

func promptTextOf(t *testing.T, body []byte) string {
	t.Helper()
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	req.keepTexts()
	tg, _, err := checkRequest(&req, Features(ProfileOpenAI))
	if err != nil {
		t.Fatal(err)
	}
	return promptText(&req, tg)
}

// TestProfileReplies covers the per-profile reply forms: tool arguments
// as an object (llamacpp), reasoning fields, the generic <think> block,
// refusals and content_filter (openai), and the token limit field each
// server reads.
func TestProfileReplies(t *testing.T) {
	t.Run("tool arguments", func(t *testing.T) {
		for _, p := range Profiles {
			resp, data := setup(t, profileConfig(p)).post(t, profileRequest(t, textOrder, true, nil))
			r := decodeReply(t, resp, data)
			args := strings.TrimSpace(string(r.Choices[0].Message.ToolCalls[0].Function.Arguments))
			isObject := strings.HasPrefix(args, "{")
			if isObject != Features(p).ToolArgsAsObject {
				t.Errorf("%s: arguments %s; object %v, want %v", p, args, isObject, Features(p).ToolArgsAsObject)
			}
			if r.Choices[0].FinishReason != "tool_calls" {
				t.Errorf("%s: finish_reason %q", p, r.Choices[0].FinishReason)
			}
		}
	})
	t.Run("reasoning", func(t *testing.T) {
		for _, p := range Profiles {
			cfg := profileConfig(p)
			cfg.Reasoning = true
			resp, data := setup(t, cfg).post(t, profileRequest(t, textOrder, false, nil))
			m := decodeReply(t, resp, data).Choices[0].Message
			got := map[string]bool{"reasoning_content": m.ReasoningContent != nil, "reasoning": m.Reasoning != nil,
				"think": m.Content != nil && strings.HasPrefix(*m.Content, "<think>\n")}
			want := map[string]bool{"reasoning_content": false, "reasoning": false, "think": false}
			switch f := Features(p); {
			case f.ReasoningField != "":
				want[f.ReasoningField] = true
			case f.ThinkInContent:
				want["think"] = true
			}
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: %s %v, want %v; reply %s", p, k, got[k], want[k], data)
				}
			}
		}
	})
	t.Run("refusal and content_filter", func(t *testing.T) {
		for _, p := range Profiles {
			cfg := profileConfig(p)
			cfg.RefusalRate = 1
			resp, data := setup(t, cfg).post(t, profileRequest(t, textOrder, false, nil))
			r := decodeReply(t, resp, data)
			refused := r.Choices[0].Message.Refusal != nil && r.Choices[0].Message.Content == nil
			if refused != Features(p).Refusal {
				t.Errorf("%s: refused %v, want %v: %s", p, refused, Features(p).Refusal, data)
			}
			cfg = profileConfig(p)
			cfg.ContentFilterRate = 1
			resp, data = setup(t, cfg).post(t, profileRequest(t, textOrder, false, nil))
			if got := decodeReply(t, resp, data).Choices[0].FinishReason == "content_filter"; got != Features(p).ContentFilter {
				t.Errorf("%s: content_filter %v, want %v", p, got, Features(p).ContentFilter)
			}
		}
	})
	t.Run("token limit field", func(t *testing.T) {
		for _, p := range Profiles {
			for _, field := range []string{"max_completion_tokens", "max_tokens"} {
				body := profileRequest(t, textDispute, false, func(m map[string]any) {
					delete(m, "max_completion_tokens")
					delete(m, "max_tokens")
					m[field] = 3
				})
				resp, data := setup(t, profileConfig(p)).post(t, body)
				cut := decodeReply(t, resp, data).Choices[0].FinishReason == "length"
				reads := false
				for _, f := range Features(p).TokenLimitFields {
					reads = reads || f == field
				}
				if cut != reads {
					t.Errorf("%s: %s 3 cut the reply %v, want %v", p, field, cut, reads)
				}
			}
		}
	})
	t.Run("rate-limit headers", func(t *testing.T) {
		for _, p := range Profiles {
			cfg := profileConfig(p)
			cfg.RequestsPerMinute = 100
			resp, _ := setup(t, cfg).post(t, profileRequest(t, textOrder, false, nil))
			if got := resp.Header.Get("X-Ratelimit-Limit-Requests") != ""; got != Features(p).RateLimitHeaders {
				t.Errorf("%s: x-ratelimit headers %v, want %v", p, got, Features(p).RateLimitHeaders)
			}
		}
	})
}

// TestProfileSeveralToolCalls checks which profiles may call the tool
// twice (SeveralToolCallsRate), and that parallel_tool_calls false stops
// it where the server reads the field.
func TestProfileSeveralToolCalls(t *testing.T) {
	t.Parallel()
	noParallel := func(req map[string]any) { req["parallel_tool_calls"] = false }
	for _, tc := range []struct {
		profile Profile
		edit    func(map[string]any)
		want    int
	}{
		{ProfileGeneric, nil, 2},
		{ProfileOpenAI, nil, 2},
		{ProfileOpenAI, noParallel, 1},
		{ProfileOllama, nil, 2},
		{ProfileOllama, noParallel, 2}, // Ollama does not read the field
		{ProfileVLLM, nil, 1},
		{ProfileLlamaCpp, nil, 1},
	} {
		t.Run(fmt.Sprintf("%s/parallel=%v", tc.profile, tc.edit == nil), func(t *testing.T) {
			t.Parallel()
			cfg := profileConfig(tc.profile)
			cfg.SeveralToolCallsRate = 1
			resp, data := setup(t, cfg).post(t, profileRequest(t, textDispute, true, tc.edit))
			var reply struct {
				Choices []struct {
					Message struct {
						ToolCalls []struct {
							ID       string `json:"id"`
							Function struct {
								Name string `json:"name"`
							} `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(data, &reply); err != nil || len(reply.Choices) != 1 {
				t.Fatalf("reply %s: %v", data, err)
			}
			calls := reply.Choices[0].Message.ToolCalls
			if len(calls) != tc.want {
				t.Fatalf("%d tool calls, want %d: %s", len(calls), tc.want, data)
			}
			if len(calls) == 2 && (calls[0].ID == calls[1].ID || calls[1].Function.Name != "record") {
				t.Errorf("second call %+v, want another id for the same tool", calls[1])
			}
			wantFault := FaultNone
			if tc.want == 2 {
				wantFault = FaultSeveralToolCalls
			}
			if got := resp.Header.Get("X-Llmsim-Fault"); got != string(wantFault) {
				t.Errorf("X-Llmsim-Fault %q, want %s", got, wantFault)
			}
			// response_format mode has no tool to call twice
			resp, _ = setup(t, cfg).post(t, profileRequest(t, textDispute, false, nil))
			if got := resp.Header.Get("X-Llmsim-Fault"); got != string(FaultNone) {
				t.Errorf("response_format mode: X-Llmsim-Fault %q, want none", got)
			}
		})
	}
}

// TestProfileParallelToolCallsRefused shows the openai profile refusing
// parallel_tool_calls for an o-series model, as OpenAI does, and taking it
// for others; the other profiles never refuse it.
func TestProfileParallelToolCallsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile Profile
		model   string
		refused bool
	}{
		{ProfileOpenAI, "o4-mini", true},
		{ProfileOpenAI, "o3-mini-2025-01-31", true},
		{ProfileOpenAI, "o1", true},
		{ProfileOpenAI, "gpt-4o-mini", false},
		{ProfileOpenAI, "gpt-5-mini", false},
		{ProfileOpenAI, "o10n", false},
		{ProfileVLLM, "o4-mini", false},
		{ProfileLlamaCpp, "o4-mini", false},
	} {
		body := profileRequest(t, textOrder, true, func(m map[string]any) {
			m["model"] = tc.model
			m["parallel_tool_calls"] = false
		})
		resp, data := setup(t, profileConfig(tc.profile)).post(t, body)
		if !tc.refused {
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: status %d, want 200: %s", tc.profile, tc.model, resp.StatusCode, data)
			}
			continue
		}
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s %s: status %d, want 400: %s", tc.profile, tc.model, resp.StatusCode, data)
		}
		e := openAIError(t, data)
		if e.Param == nil || *e.Param != "parallel_tool_calls" || e.Code == nil || *e.Code != "unsupported_parameter" ||
			e.Message != "Unsupported parameter: 'parallel_tool_calls' is not supported with this model." {
			t.Errorf("%s %s: error %+v", tc.profile, tc.model, e)
		}
	}
}
