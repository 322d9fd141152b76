package llmsim

import (
	"fmt"
	"slices"
	"strings"
)

// Profile names the server the simulator behaves as (config
// simulator.profile). Each profile reproduces its server's documented
// request handling and builds its replies from that server's wire shapes,
// the fixtures under testdata/profiles/<profile>/ (each names its source:
// repository, path and commit, or URL and date).
type Profile string

// The profiles. ProfileGeneric is the simulator's own behaviour, the
// default: the demo's and the benchmarks' figures are its figures.
const (
	ProfileGeneric  Profile = "generic"
	ProfileOpenAI   Profile = "openai"
	ProfileVLLM     Profile = "vllm"
	ProfileOllama   Profile = "ollama"
	ProfileLlamaCpp Profile = "llamacpp"
)

// Profiles lists every profile, generic first.
var Profiles = []Profile{ProfileGeneric, ProfileOpenAI, ProfileVLLM, ProfileOllama, ProfileLlamaCpp}

// ParseProfile returns the profile named s; "" is generic. The error names
// the known profiles.
func ParseProfile(s string) (Profile, error) {
	if s == "" {
		return ProfileGeneric, nil
	}
	p := Profile(s)
	if !slices.Contains(Profiles, p) {
		names := make([]string, len(Profiles))
		for i, q := range Profiles {
			names[i] = string(q)
		}
		return "", fmt.Errorf("llmsim: profile %q is not one of %s", s, strings.Join(names, ", "))
	}
	return p, nil
}

// Schema enforcement: what a profile does with the schema a request sends.
//
// A server that enforces constrains decoding to the schema (OpenAI's strict
// structured outputs, vLLM's guided decoding, llama.cpp's grammar, Ollama's
// format), so every reply it sends conforms to the schema that request
// sent: response_format's json_schema, or the forced tool's parameters. The
// simulator reproduces what such a grammar can and cannot prevent:
//
//   - It prevents what breaks the structure: prose or a code fence around
//     the JSON, invalid JSON, a wrong JSON type, a missing required
//     property, a key additionalProperties: false forbids, a value outside
//     an enum or const. The first-reply faults invalid_json, fenced, prose,
//     wrong_type, missing_required and wrong_enum are therefore never sent under
//     enforcement (X-Llmsim-Fault says none, X-Llmsim-Prevented names the
//     fault the grammar prevented).
//   - It cannot prevent wrong values of the right shape: an id that is not
//     in the message (ungrounded), a wrong but allowed enum value, a wrong
//     number. Nor can it prevent the token limit: a truncated reply is cut
//     with finish_reason length whatever the grammar.
//   - It constrains to the schema of that request, not to what the prompt
//     asks: a repair that asks in words for a JSON Patch but sends the
//     record's schema gets a record (the regenerate form of the same
//     fixes); a repair that sends a patch-shaped schema gets a patch.
//
// The simulator checks structure (JSON, types, required, additionalProperties
// false, enum, const, items, $ref, anyOf/oneOf); it does not claim that a
// grammar enforces pattern, format or length keywords, which servers
// support unevenly. A reply that does not conform is replaced by the
// nearest one that does: for a repair the regenerate form of its fixes,
// else the honest record filled from the request's schema.

// ProfileFeatures describes what a profile does, for a conformance suite
// to read (as watermill's tests.Features does for its pub/sub suite). The
// source of each value is in the comment of Features' table and in the
// profile's fixtures.
type ProfileFeatures struct {
	Profile Profile

	// TokenLimitFields are the request fields the server reads as the
	// completion limit, in precedence order; a field not listed is
	// ignored (Ollama ignores max_completion_tokens).
	TokenLimitFields []string
	// Strict reports that the server honours strict: true (response_format
	// json_schema.strict, tools[].function.strict): it enforces the schema
	// and refuses, with a 400, a schema outside the strict subset (an
	// object without additionalProperties: false, or whose required list
	// misses a property). Servers without it accept and ignore strict.
	Strict bool
	// EnforcesSchema reports that replies to a response_format json_schema
	// conform to that schema without strict (vLLM, Ollama, llama.cpp);
	// OpenAI enforces only with strict.
	EnforcesSchema bool
	// EnforcesToolSchema reports that a forced tool call's arguments
	// conform to the tool's parameters: vLLM for a named or "required"
	// tool_choice; OpenAI with strict tools. Others parse the arguments out
	// of the model's text, unconstrained.
	EnforcesToolSchema bool
	// ToolChoice reports that tool_choice is read; Ollama ignores it.
	ToolChoice bool
	// ParallelToolCalls reports that parallel_tool_calls is read: with
	// false the server sends at most one tool call.
	ParallelToolCalls bool
	// SeveralToolCalls reports that the server may answer a request that
	// forces one tool with several calls of it (at SeveralToolCallsRate):
	// OpenAI unless parallel_tool_calls is false (a named tool_choice is
	// read as "at least this tool", Arize-ai/phoenix#6300; the structured
	// outputs guide asks for parallel_tool_calls false with strict
	// tools), Ollama (it reads neither tool_choice nor
	// parallel_tool_calls: the model's text decides). Not vLLM, whose
	// guided decoding of a named tool_choice yields one call, nor
	// llama.cpp, whose parallel_tool_calls defaults to false.
	SeveralToolCalls bool
	// RefusesUnknownResponseFormat reports a 400 for a response_format
	// type other than text, json_object and json_schema (llama.cpp).
	RefusesUnknownResponseFormat bool
	// Seed reports that seed is read.
	Seed bool
	// Usage reports that replies carry usage (every profile does for a
	// reply that is not streamed).
	Usage bool
	// CachedTokens is how usage.prompt_tokens_details.cached_tokens is
	// reported: "" not at all (null or absent), "openai" a repeated prefix
	// of 1,024 tokens and more in steps of 128, "prefix" every token of
	// the prefix shared with the previous prompt (llama.cpp's slot cache).
	CachedTokens string
	// Refusal and ContentFilter report that the server may answer a
	// refusal (message.refusal, content null) or finish_reason
	// content_filter; the simulator does at RefusalRate and
	// ContentFilterRate.
	Refusal       bool
	ContentFilter bool
	// ReasoningField is the message field that holds reasoning text when
	// config Reasoning is on ("reasoning_content", "reasoning"), "" for
	// none; ThinkInContent puts it as <think>...</think> before the
	// content instead.
	ReasoningField string
	ThinkInContent bool
	// ToolArgsAsObject reports tool call arguments sent as a JSON object
	// instead of a JSON string.
	ToolArgsAsObject bool
	// RateLimitHeaders reports x-ratelimit-* headers on the provider's
	// answers (with enforced limits), and Retry-After on its 429s.
	RateLimitHeaders bool
	// ErrorCodeInteger reports an error object whose code is the HTTP
	// status as a number (vLLM, llama.cpp) instead of a string or null.
	ErrorCodeInteger bool
	// ErrorParam reports an error object with a param member (all but
	// llama.cpp).
	ErrorParam bool
}

// Features returns what profile p does. An unknown profile is generic.
//
// Sources, by profile (the fixtures hold the literal shapes):
//
//   - openai: openai/openai-openapi openapi.yaml at f85dbe22
//     (CreateChatCompletionRequest: max_completion_tokens, max_tokens
//     deprecated; strict, parallel_tool_calls, tool_choice forms,
//     response_format text | json_object | json_schema; seed; the response
//     message's refusal; finish_reason content_filter; CompletionUsage
//     prompt_tokens_details.cached_tokens), openai/openai-python
//     tests/lib/chat (recorded refusal reply, content_filter reply),
//     OpenAI's Prompt Caching 201 cookbook (1,024 tokens, steps of 128).
//   - vllm: vllm-project/vllm vllm/entrypoints/openai/protocol.py at
//     0052bed3 (ChatCompletionRequest: both token fields, strict not a
//     field of FunctionDefinition, parallel_tool_calls "ignored by vLLM",
//     guided_json from response_format json_schema and from a named or
//     required tool_choice; check_tool_usage; ErrorResponse with an
//     integer code; ChatMessage.reasoning_content; UsageInfo with
//     prompt_tokens_details null by default).
//   - ollama: ollama/ollama at fb307609, docs/api/openai-compatibility.mdx
//     (tool_choice and n unsupported), openai/openai.go (max_tokens to
//     num_predict, response_format json_schema to format, reasoning,
//     ErrorResponse with type by status), docs/capabilities/structured-
//     outputs.mdx (format enforces the schema).
//   - llamacpp: ggml-org/llama.cpp tools/server/README.md at 00dc8057
//     (response_format json_object / json_schema to a grammar,
//     parallel_tool_calls, reasoning_content, usage with cached_tokens,
//     timings, the error object), tools/server/tests/unit/
//     test_chat_completion.py (an unknown response_format type is a 400),
//     issue ggml-org/llama.cpp#20198 (tool arguments as an object).
func Features(p Profile) ProfileFeatures {
	switch p {
	case ProfileOpenAI:
		return ProfileFeatures{
			Profile:            p,
			TokenLimitFields:   []string{"max_completion_tokens", "max_tokens"},
			Strict:             true,
			EnforcesToolSchema: true, // with strict tools
			ToolChoice:         true,
			ParallelToolCalls:  true,
			SeveralToolCalls:   true,
			Seed:               true,
			Usage:              true,
			CachedTokens:       "openai",
			Refusal:            true,
			ContentFilter:      true,
			RateLimitHeaders:   true,
			ErrorParam:         true,
		}
	case ProfileVLLM:
		return ProfileFeatures{
			Profile:            p,
			TokenLimitFields:   []string{"max_completion_tokens", "max_tokens"},
			EnforcesSchema:     true,
			EnforcesToolSchema: true, // named or "required" tool_choice
			ToolChoice:         true,
			// vllm/entrypoints/openai/utils.py at 432a38c4:
			// maybe_filter_parallel_tool_calls keeps the first call.
			ParallelToolCalls: true,
			Seed:              true,
			Usage:             true,
			ReasoningField:    "reasoning_content",
			ErrorCodeInteger:  true,
			ErrorParam:        true,
		}
	case ProfileOllama:
		return ProfileFeatures{
			Profile:          p,
			TokenLimitFields: []string{"max_tokens"},
			EnforcesSchema:   true,
			SeveralToolCalls: true,
			Seed:             true,
			Usage:            true,
			ReasoningField:   "reasoning",
			ErrorParam:       true,
		}
	case ProfileLlamaCpp:
		return ProfileFeatures{
			Profile:                      p,
			TokenLimitFields:             []string{"max_completion_tokens", "max_tokens"},
			EnforcesSchema:               true,
			ToolChoice:                   true,
			ParallelToolCalls:            true,
			RefusesUnknownResponseFormat: true,
			Seed:                         true,
			Usage:                        true,
			CachedTokens:                 "prefix",
			ReasoningField:               "reasoning_content",
			ToolArgsAsObject:             true,
			ErrorCodeInteger:             true,
		}
	}
	return ProfileFeatures{
		Profile:           ProfileGeneric,
		TokenLimitFields:  []string{"max_completion_tokens", "max_tokens"},
		ToolChoice:        true,
		ParallelToolCalls: false,
		SeveralToolCalls:  true,
		Seed:              true,
		Usage:             true,
		ThinkInContent:    true,
		RateLimitHeaders:  true,
		ErrorParam:        true,
	}
}

// tokenLimit returns the completion limit req asks for as the profile
// reads it, 0 for none.
func (f ProfileFeatures) tokenLimit(req *chatRequest) int {
	for _, field := range f.TokenLimitFields {
		switch field {
		case "max_completion_tokens":
			if req.MaxCompletionTokens > 0 {
				return req.MaxCompletionTokens
			}
		case "max_tokens":
			if req.MaxTokens > 0 {
				return req.MaxTokens
			}
		}
	}
	return 0
}

// enforced reports whether the reply to req, filling target tg, conforms
// to tg's schema under the profile (see Schema enforcement).
func (f ProfileFeatures) enforced(req *chatRequest, tg target) bool {
	if tg.schema == nil {
		return false
	}
	if tg.toolName != "" {
		switch f.Profile {
		case ProfileOpenAI:
			return tg.strict
		case ProfileVLLM:
			return tg.forced
		}
		return false
	}
	if f.Profile == ProfileOpenAI {
		return tg.strict
	}
	return f.EnforcesSchema
}
