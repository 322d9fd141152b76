package pipeline

import (
	"slices"
	"strings"
)

// Providers: the values of the configuration's llm.provider. The setting
// names the server behind the endpoint and decides what each request
// carries; it changes nothing in how replies are validated. See
// docs/providers.md.
const (
	ProviderOpenAI   = "openai"
	ProviderVLLM     = "vllm"
	ProviderOllama   = "ollama"
	ProviderLlamaCpp = "llamacpp"
	ProviderGeneric  = "generic"
)

// Token-limit fields: the request field that caps a reply.
const (
	TokenLimitMaxCompletionTokens = "max_completion_tokens"
	TokenLimitMaxTokens           = "max_tokens"
)

// Forms of tool_choice that force the one tool of a tools-mode request.
const (
	// ToolChoiceNamed is {"type":"function","function":{"name":...}}.
	ToolChoiceNamed = "named"
	// ToolChoiceRequired is the string "required", with only the one tool
	// offered, so that it is the one called.
	ToolChoiceRequired = "required"
	// ToolChoiceOmitted sends no tool_choice: the server has none, and a
	// reply without the tool call is a tool error, repaired once.
	ToolChoiceOmitted = "omitted"
)

// Features is what one provider accepts in a chat completion request, as
// its own documentation or source states (each entry of the table cites
// it, with the commit read).
type Features struct {
	// TokenLimit is the field that caps each reply:
	// TokenLimitMaxCompletionTokens or TokenLimitMaxTokens. Only one is
	// sent: OpenAI refuses a request carrying both ("Setting 'max_tokens'
	// and 'max_completion_tokens' at the same time is not supported",
	// reported in langchain-ai/langgraph#5943).
	TokenLimit string
	// Strict sends strict: true on the response_format JSON schema and on
	// the tool's function, with the schema converted to the strict subset
	// (see StrictSchema).
	Strict bool
	// ToolChoice is how a tools-mode request forces its one tool.
	ToolChoice string
	// NoParallelToolCalls sends parallel_tool_calls: false on a tools-mode
	// request, to a server that reads it: the reply then holds at most
	// one tool call. OpenAI's structured outputs guide asks for it with
	// strict tools, whose schema a parallel call may not match; a named
	// tool_choice alone does not stop a second call.
	NoParallelToolCalls bool
	// JSONSchema reports that response_format {"type":"json_schema"} is
	// honoured. Without it, response_format mode sends {"type":
	// "json_object"}: JSON, in a shape the server does not check.
	JSONSchema bool
	// Enforced reports that the server constrains its output to the
	// schema sent (strict structured outputs, guided decoding, a grammar):
	// replies then have the shape asked for, though their values may
	// still be wrong. Informational: every reply is validated the same.
	Enforced bool
}

// providerFeatures is the table of what each provider accepts.
var providerFeatures = map[string]Features{
	// OpenAI's API reference (openai/openai-openapi, openapi.yaml at
	// 578000861507cd19620e3f1092adf62303757c0a, CreateChatCompletionRequest):
	// max_tokens "is now deprecated in favor of max_completion_tokens, and
	// is not compatible with o-series models"; tool_choice takes "none",
	// "auto", "required" or {"type":"function","function":{"name"}};
	// response_format json_schema and FunctionObject carry strict.
	// Strict mode and its subset of JSON Schema:
	// https://platform.openai.com/docs/guides/structured-outputs
	// ("Supported schemas"); parallel_tool_calls "Whether to enable
	// parallel function calling during tool use", default true, and the
	// function-calling guide: structured outputs are not compatible with
	// parallel function calls, so set it to false.
	ProviderOpenAI: {TokenLimit: TokenLimitMaxCompletionTokens, Strict: true, ToolChoice: ToolChoiceNamed, NoParallelToolCalls: true, JSONSchema: true, Enforced: true},
	// vLLM (vllm-project/vllm, vllm/entrypoints/openai/chat_completion/protocol.py
	// at d5dba2d7b0ab9b98096560c69db7126b54b14d79): ChatCompletionRequest
	// takes max_tokens (deprecated) and max_completion_tokens, the latter
	// winning (build_tok_params); tool_choice "none", "auto", "required"
	// or ChatCompletionNamedToolChoiceParam, a named tool's parameters
	// becoming the guided-decoding schema; response_format json_schema
	// becomes guided_json. engine/protocol.py at
	// d7e52523a55cfd60207c99d9f3b7ed527d2115b7: JsonSchemaResponseFormat
	// accepts strict (decoding is guided whatever it says) and
	// FunctionDefinition has no strict (an extra field is ignored with a
	// warning), so strict is not sent. vllm/entrypoints/openai/utils.py at
	// 432a38c440655622ff7875c4877f0756c44e1fbf: maybe_filter_parallel_tool_calls
	// keeps only the first tool call when parallel_tool_calls is false.
	ProviderVLLM: {TokenLimit: TokenLimitMaxCompletionTokens, Strict: false, ToolChoice: ToolChoiceNamed, NoParallelToolCalls: true, JSONSchema: true, Enforced: true},
	// Ollama (ollama/ollama, docs/openai.md at
	// 3235f0e8c2aebc14dc1010926b1c56947fc1ceb3: max_tokens, tools and
	// response_format supported, tool_choice not; openai/openai.go at
	// 634c416645790c84dfc80849b05f84b3853b127f: ChatCompletionRequest has
	// MaxTokens (num_predict) and no max_completion_tokens, tool_choice or
	// parallel_tool_calls, which are ignored; response_format json_schema
	// becomes the request's format, a grammar).
	ProviderOllama: {TokenLimit: TokenLimitMaxTokens, Strict: false, ToolChoice: ToolChoiceOmitted, JSONSchema: true, Enforced: true},
	// llama.cpp server (ggml-org/llama.cpp, tools/server/README.md at
	// 25d5b0c53f9a146f3d7a99a18610d9d623b5041e: response_format
	// json_object or json_schema with a schema, grammar-constrained; tool
	// calls with --jinja); common/chat.cpp at
	// 85c9a5042b0693d4932d4e485377c516aafd1b30: tool_choice is the string
	// "auto", "none" or "required" (an object is not read as a name);
	// tools/server/server-task.cpp: n_predict from n_predict or max_tokens.
	// The README lists parallel_tool_calls (default false); it is sent
	// false all the same, so that a server started otherwise answers one
	// call.
	ProviderLlamaCpp: {TokenLimit: TokenLimitMaxTokens, Strict: false, ToolChoice: ToolChoiceRequired, NoParallelToolCalls: true, JSONSchema: true, Enforced: true},
	// generic: an unnamed OpenAI-compatible server. What the product sent
	// before providers were named: OpenAI's current field and request
	// shape, without strict mode (a server without strict may refuse the
	// flag, and the strict subset drops keywords for nothing), and no
	// parallel_tool_calls (a server that validates its fields may refuse
	// one it lacks; a second call is repaired like any tool error).
	ProviderGeneric: {TokenLimit: TokenLimitMaxCompletionTokens, Strict: false, ToolChoice: ToolChoiceNamed, JSONSchema: true, Enforced: false},
}

// refusesParallelToolCalls reports whether model names an OpenAI o-series
// reasoning model (o1, o3, o4, with their -mini and dated variants), which
// answer parallel_tool_calls with a 400 "Unsupported parameter:
// 'parallel_tool_calls' is not supported with this model." (code
// unsupported_parameter; reported for o3-mini and o4-mini in
// langchain-ai/langchain#29704, evalstate/fast-agent#279,
// tensorzero/tensorzero#2805). gpt-5 and later take the field.
func refusesParallelToolCalls(model string) bool {
	for _, p := range []string{"o1", "o3", "o4"} {
		if model == p || strings.HasPrefix(model, p+"-") {
			return true
		}
	}
	return false
}

// ProviderFeatures returns the features of the provider name (one of the
// Provider constants); false for an unknown name.
func ProviderFeatures(name string) (Features, bool) {
	f, ok := providerFeatures[name]
	return f, ok
}

// ProviderNames returns the known provider names, sorted.
func ProviderNames() []string {
	out := make([]string, 0, len(providerFeatures))
	for k := range providerFeatures {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// providerList is ProviderNames joined for messages.
func providerList() string { return strings.Join(ProviderNames(), ", ") }
