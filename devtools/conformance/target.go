package conformance

import (
	"slices"

	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/pipeline"
)

// Target is one pairing the suite runs its cases against: the server the
// simulator behaves as (simulator.profile) and the server the worker is
// set for (llm.provider). The two are kept apart on purpose: a matched
// target is the configuration docs/providers.md gives, a mismatch is a
// worker set for one server talking to another.
type Target struct {
	// Profile is the simulator's profile: how the server behaves.
	Profile llmsim.Profile
	// Provider is the worker's llm.provider: what it sends and expects.
	Provider string
}

// Name is the target's subtest name: the profile for a matched target,
// else "<provider>_on_<profile>".
func (t Target) Name() string {
	if t.Matched() {
		return string(t.Profile)
	}
	return t.Provider + "_on_" + string(t.Profile)
}

// Matched reports whether the worker is set for the server it talks to.
func (t Target) Matched() bool { return string(t.Profile) == t.Provider }

// Targets are every pairing the suite runs: each profile with the worker
// set for it, then the mismatches. The mismatches are generic against
// each named server (a worker left at the default), and the pairs whose
// requests differ the most: openai (strict, max_completion_tokens)
// against ollama (reads only max_tokens, no strict), ollama (max_tokens,
// no tool_choice) against openai, vllm (named tool_choice) against
// llamacpp (tool arguments as an object) and llamacpp ("required") against
// vllm.
var Targets = append(matched(), []Target{
	{Profile: llmsim.ProfileOpenAI, Provider: pipeline.ProviderGeneric},
	{Profile: llmsim.ProfileVLLM, Provider: pipeline.ProviderGeneric},
	{Profile: llmsim.ProfileOllama, Provider: pipeline.ProviderGeneric},
	{Profile: llmsim.ProfileLlamaCpp, Provider: pipeline.ProviderGeneric},
	{Profile: llmsim.ProfileOllama, Provider: pipeline.ProviderOpenAI},
	{Profile: llmsim.ProfileOpenAI, Provider: pipeline.ProviderOllama},
	{Profile: llmsim.ProfileLlamaCpp, Provider: pipeline.ProviderVLLM},
	{Profile: llmsim.ProfileVLLM, Provider: pipeline.ProviderLlamaCpp},
}...)

func matched() []Target {
	out := make([]Target, 0, len(llmsim.Profiles))
	for _, p := range llmsim.Profiles {
		out = append(out, Target{Profile: p, Provider: string(p)})
	}
	return out
}

// Env is what a case's expectation depends on: the target, what the
// server does (llmsim.Features of its profile), what the worker sends
// (pipeline.ProviderFeatures of its provider) and the case's request mode.
type Env struct {
	Target
	Server llmsim.ProfileFeatures
	Worker pipeline.Features
	// Mode is pipeline.ModeResponseFormat or pipeline.ModeTools.
	Mode string
}

// NewEnv returns the Env of target tg for a case in request mode mode.
func NewEnv(tg Target, mode string) Env {
	w, ok := pipeline.ProviderFeatures(tg.Provider)
	if !ok {
		w, _ = pipeline.ProviderFeatures(pipeline.ProviderGeneric)
	}
	if mode == "" {
		mode = pipeline.ModeResponseFormat
	}
	return Env{Target: tg, Server: llmsim.Features(tg.Profile), Worker: w, Mode: mode}
}

// Tools reports a tools-mode case.
func (e Env) Tools() bool { return e.Mode == pipeline.ModeTools }

// Enforced reports whether the server constrains its replies to the
// schema the worker's requests send, from the two Features alone: a
// server with strict mode (OpenAI) enforces only what is sent with
// strict: true; in response_format mode vLLM, Ollama and llama.cpp
// enforce the json_schema whatever strict says; in tools mode a server
// that enforces tool schemas (vLLM) does so only for a forced tool (a
// named or "required" tool_choice it reads).
func (e Env) Enforced() bool {
	switch {
	case e.Server.Strict:
		return e.Worker.Strict
	case !e.Tools():
		return e.Server.EnforcesSchema && e.Worker.JSONSchema
	case e.Server.EnforcesToolSchema:
		return e.Server.ToolChoice && e.Worker.ToolChoice != pipeline.ToolChoiceOmitted
	}
	return false
}

// CapHonoured reports whether the server reads the token-limit field the
// worker sends (Ollama reads only max_tokens).
func (e Env) CapHonoured() bool {
	return slices.Contains(e.Server.TokenLimitFields, e.Worker.TokenLimit)
}
