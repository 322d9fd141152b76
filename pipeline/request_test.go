package pipeline

import (
	"encoding/json"
	"slices"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
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
	ext := NewExtractor(nil, ExtractorConfig{Provider: "nonesuch"})
	if ext.cfg.Provider != ProviderGeneric || ext.feats != providerFeatures[ProviderGeneric] {
		t.Fatalf("unknown provider gives %s %+v, want generic", ext.cfg.Provider, ext.feats)
	}
}

// TestRequestByProvider checks what each provider is sent: the token-limit
// field, strict and the tool_choice form.
func TestRequestByProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider   string
		tokenField string
		strict     bool
		toolChoice any // tools mode: what tool_choice is on the wire
	}{
		{ProviderOpenAI, "max_completion_tokens", false, map[string]any{"type": "function", "function": map[string]any{"name": toolName}}},
		{ProviderVLLM, "max_completion_tokens", false, map[string]any{"type": "function", "function": map[string]any{"name": toolName}}},
		{ProviderOllama, "max_tokens", false, nil},
		{ProviderLlamaCpp, "max_tokens", false, "required"},
		{ProviderGeneric, "max_completion_tokens", false, map[string]any{"type": "function", "function": map[string]any{"name": toolName}}},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			t.Parallel()
			other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[tc.tokenField]
			for _, mode := range []string{ModeResponseFormat, ModeTools} {
				ext, in := newTestExtractor(t, tc.provider, mode)
				m := wire(t, ext.request(nil, in))
				if m[tc.tokenField] != 300.0 || m[other] != nil {
					t.Errorf("%s: %s=%v %s=%v, want only %s", mode, tc.tokenField, m[tc.tokenField], other, m[other], tc.tokenField)
				}
				if mode == ModeResponseFormat {
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
