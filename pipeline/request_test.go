package pipeline

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/extracttype"
)

// wire returns req as the JSON object sent.
func wire(t *testing.T, req openai.ChatCompletionRequest) map[string]any {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func dig(m any, keys ...string) any {
	for _, k := range keys {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

func newTestExtractor(t *testing.T, provider, mode string) (*Extractor, Input) {
	t.Helper()
	prompt, err := LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	ext := NewExtractor(nil, ExtractorConfig{Model: "m", Provider: provider, RequestMode: mode, MaxCompletionTokens: 300})
	return ext, Input{Text: orderText, Schema: loadTestSchema(t), Prompt: prompt, Repair: RepairPatch}
}

func TestProviderTable(t *testing.T) {
	t.Parallel()
	if got, want := ProviderNames(), slices.Sorted(slices.Values(config.Providers)); !slices.Equal(got, want) {
		t.Fatalf("pipeline knows providers %v, the configuration %v", got, want)
	}
	// go-openai would refuse max_tokens for a reasoning-model name before
	// sending anything; the extractor sends max_completion_tokens instead.
	if ext := NewExtractor(nil, ExtractorConfig{Provider: ProviderOllama, Model: "gpt-5-mini"}); ext.feats.TokenLimit != TokenLimitMaxCompletionTokens {
		t.Fatalf("token limit %s for gpt-5-mini on ollama", ext.feats.TokenLimit)
	}
	if ext := NewExtractor(nil, ExtractorConfig{Provider: ProviderOllama, Model: "llama3.1"}); ext.feats.TokenLimit != TokenLimitMaxTokens {
		t.Fatalf("token limit %s for llama3.1 on ollama", ext.feats.TokenLimit)
	}
	ext := NewExtractor(nil, ExtractorConfig{Provider: "nonesuch"})
	if ext.cfg.Provider != ProviderGeneric || ext.feats != providerFeatures[ProviderGeneric] {
		t.Fatalf("unknown provider gives %s %+v, want generic", ext.cfg.Provider, ext.feats)
	}
}

// TestRequestByProvider checks what each provider is sent: the token-limit
// field, strict, the tool_choice form and parallel_tool_calls.
func TestRequestByProvider(t *testing.T) {
	t.Parallel()
	named := map[string]any{"type": "function", "function": map[string]any{"name": toolName}}
	for _, tc := range []struct {
		provider   string
		tokenField string
		strict     bool
		toolChoice any // tools mode: what tool_choice is on the wire
		parallel   any // tools mode: parallel_tool_calls on the wire (nil: absent)
	}{
		{ProviderOpenAI, "max_completion_tokens", true, named, false},
		{ProviderVLLM, "max_completion_tokens", false, named, false},
		{ProviderOllama, "max_tokens", false, nil, nil},
		{ProviderLlamaCpp, "max_tokens", false, "required", false},
		{ProviderGeneric, "max_completion_tokens", false, named, nil},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			t.Parallel()
			other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[tc.tokenField]
			for _, mode := range []string{ModeResponseFormat, ModeTools} {
				ext, in := newTestExtractor(t, tc.provider, mode)
				m := wire(t, ext.request(nil, in, ""))
				if m[tc.tokenField] != 300.0 || m[other] != nil {
					t.Errorf("%s: %s=%v %s=%v, want only %s", mode, tc.tokenField, m[tc.tokenField], other, m[other], tc.tokenField)
				}
				if mode == ModeResponseFormat {
					if _, ok := m["parallel_tool_calls"]; ok {
						t.Errorf("response_format mode sends parallel_tool_calls %v", m["parallel_tool_calls"])
					}
					if got := dig(m, "response_format", "json_schema", "strict"); got != tc.strict {
						t.Errorf("response_format strict %v, want %v", got, tc.strict)
					}
					continue
				}
				tools, _ := m["tools"].([]any)
				if len(tools) != 1 || dig(tools[0], "function", "name") != toolName {
					t.Fatalf("tools %v", m["tools"])
				}
				if got, _ := dig(tools[0], "function", "strict").(bool); got != tc.strict {
					t.Errorf("function strict %v, want %v", got, tc.strict)
				}
				if got, _ := json.Marshal(m["tool_choice"]); string(got) != mustJSON(t, tc.toolChoice) {
					t.Errorf("tool_choice %s, want %s", got, mustJSON(t, tc.toolChoice))
				}
				if got, ok := m["parallel_tool_calls"]; got != tc.parallel || (tc.parallel == nil && ok) {
					t.Errorf("parallel_tool_calls %v (present %v), want %v", got, ok, tc.parallel)
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPatchRepairRequest checks that a patch repair asks for a patch, in
// both request modes and under every provider: the patch schema as
// response_format, or the patch tool (with that schema as parameters)
// forced by tool_choice; never the record's schema. A regenerate repair
// asks for the record as the extraction does.
func TestPatchRepairRequest(t *testing.T) {
	t.Parallel()
	for _, provider := range ProviderNames() {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			for _, mode := range []string{ModeResponseFormat, ModeTools} {
				ext, in := newTestExtractor(t, provider, mode)
				strict := ext.feats.Strict
				m := wire(t, ext.request(nil, in, RepairPatch))
				var sent any
				if mode == ModeResponseFormat {
					if name := dig(m, "response_format", "json_schema", "name"); name != patchFormatName {
						t.Errorf("%s: response_format name %v", mode, name)
					}
					sent = dig(m, "response_format", "json_schema", "schema")
				} else {
					tools, _ := m["tools"].([]any)
					if len(tools) != 1 || dig(tools[0], "function", "name") != patchToolName {
						t.Fatalf("%s: tools %v, want only %s", mode, m["tools"], patchToolName)
					}
					sent = dig(tools[0], "function", "parameters")
					switch ext.feats.ToolChoice {
					case ToolChoiceNamed:
						if dig(m, "tool_choice", "function", "name") != patchToolName {
							t.Errorf("tool_choice %v does not force %s", m["tool_choice"], patchToolName)
						}
					case ToolChoiceRequired:
						if m["tool_choice"] != "required" {
							t.Errorf("tool_choice %v", m["tool_choice"])
						}
					}
				}
				if got := mustJSON(t, sent); got != string(PatchSchema(strict)) {
					t.Errorf("%s: schema sent %s, want the patch schema %s", mode, got, PatchSchema(strict))
				}
				if strings.Contains(mustJSON(t, sent), "order_id") {
					t.Errorf("%s: the patch repair sent the record schema", mode)
				}

				in.Repair = RepairRegenerate
				m = wire(t, ext.request(nil, in, RepairRegenerate))
				if mode == ModeResponseFormat {
					sent = dig(m, "response_format", "json_schema", "schema")
				} else {
					sent = dig(m["tools"].([]any)[0], "function", "parameters")
				}
				if got := mustJSON(t, sent); got != string(ext.sent(in.Schema).record) {
					t.Errorf("%s: regenerate sent %s, want the record schema", mode, got)
				}
			}
		})
	}
}

// TestPatchRepairEnforcedSchema runs a patch repair against a server that
// enforces the schema each request sends: the repair call can only answer
// in the shape it asked for. Sending the record's schema for a patch
// repair (as the product once did) made every such repair end
// patch_invalid; with the patch schema it is repaired.
func TestPatchRepairEnforcedSchema(t *testing.T) {
	t.Parallel()
	const patchObj = `{"operations":[{"op":"replace","path":"/order_id","value":"4821300017"}]}`
	for _, provider := range []string{ProviderVLLM, ProviderOpenAI, ProviderLlamaCpp} {
		for _, mode := range []string{ModeResponseFormat, ModeTools} {
			t.Run(provider+"/"+mode, func(t *testing.T) {
				t.Parallel()
				// The model means the same in both calls: a record with a
				// wrong order id, then the patch that fixes it; the server
				// lets through whichever fits the schema asked for.
				srv, url := newEnforcing(t, []string{patchObj, ungroundedJSON}, []string{patchObj, ungroundedJSON})
				cfg := openai.DefaultConfig("k")
				cfg.BaseURL = url
				prompt, err := LoadPrompt("extract.v1")
				if err != nil {
					t.Fatal(err)
				}
				ext := NewExtractor(openai.NewClientWithConfig(cfg), ExtractorConfig{
					Model: "m", Provider: provider, RequestMode: mode, MaxCompletionTokens: 256, ContextWindowTokens: 8192,
					Budget: Budget{MaxTokens: 8000, MaxCostUSD: 1},
				})
				in := Input{Text: orderText, Schema: loadTestSchema(t), Prompt: prompt, Repair: RepairPatch}
				res, err := ext.Process(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome != OutcomeRepaired {
					t.Errorf("outcome %s %v, want repaired", res.Outcome, res.Errors)
				}
				if len(srv.schemas) != 2 || strings.Contains(string(srv.schemas[1]), "order_id") ||
					!strings.Contains(string(srv.schemas[1]), `"operations"`) {
					t.Fatalf("repair request's schema %s, want the patch schema", srv.schemas[len(srv.schemas)-1])
				}
				if string(res.Patch) != `[{"op":"replace","path":"/order_id","value":"4821300017"}]` {
					t.Fatalf("patch %s, want the RFC 6902 array", res.Patch)
				}
				if res.Calls[1].RepairStrategy != RepairPatch {
					t.Fatalf("call %+v", res.Calls[1])
				}
			})
		}
	}
}

func TestPatchOperations(t *testing.T) {
	t.Parallel()
	for reply, ok := range map[string]bool{
		`[{"op":"remove","path":"/a"}]`:                    true,
		`{"operations":[{"op":"remove","path":"/a"}]}`:     true,
		`{"operations":[]}`:                                true,
		`{"operations":{"op":"remove"}}`:                   false,
		`{"operations":[],"note":"x"}`:                     false,
		`{"ops":[]}`:                                       false,
		`{"operations":[],"operations":[{"op":"remove"}]}`: false,
		`{"operations":`:                                   false,
	} {
		ops, errs := patchOperations(reply)
		if ok != (len(errs) == 0) {
			t.Errorf("%s: ops %q errs %v", reply, ops, errs)
		}
		if !ok && errs[0].Kind != extracttype.KindPatchInvalid {
			t.Errorf("%s: kind %s", reply, errs[0].Kind)
		}
	}
}

// TestParallelToolCallsByModel checks that the o-series models, which
// refuse parallel_tool_calls, are not sent it, and others are.
func TestParallelToolCallsByModel(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{"o4-mini": false, "o3": false, "o1-2024-12-17": false, "gpt-4o-mini": true, "gpt-5": true, "o10n": true} {
		ext := NewExtractor(nil, ExtractorConfig{Model: model, Provider: ProviderOpenAI, RequestMode: ModeTools, MaxCompletionTokens: 300})
		_, in := newTestExtractor(t, ProviderOpenAI, ModeTools)
		_, sent := wire(t, ext.request(nil, in, ""))["parallel_tool_calls"]
		if sent != want {
			t.Errorf("%s: parallel_tool_calls sent %v, want %v", model, sent, want)
		}
	}
}
