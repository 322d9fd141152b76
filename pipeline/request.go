package pipeline

import (
	"encoding/json"

	openai "github.com/sashabaranov/go-openai"
)

// Tools of a tools-mode request: the extraction and the regenerate repair
// call toolName with the record; a patch repair calls patchToolName with
// the operations (PatchSchema).
const (
	toolName      = "record_extraction"
	patchToolName = "record_patch"
	// patchFormatName names the patch schema as response_format.
	patchFormatName = "json_patch"
)

// patchSchema is the output schema of a patch repair: an object holding
// the RFC 6902 operations (add, remove or replace; value for add and
// replace), so that a server that enforces the schema it is sent (vLLM's
// guided decoding, llama.cpp's grammar, Ollama's format) can answer a
// patch, not a record. Tool parameters must be an object, hence the
// wrapper.
var patchSchema = json.RawMessage(mustCompact(`{"type":"object","additionalProperties":false,"required":["operations"],` +
	`"properties":{"operations":{"type":"array","maxItems":32,"description":"RFC 6902 operations against your previous JSON",` +
	`"items":{"type":"object","additionalProperties":false,"required":["op","path"],"properties":{` +
	`"op":{"type":"string","enum":["add","remove","replace"]},` +
	`"path":{"type":"string","description":"JSON Pointer of the field to change"},` +
	`"value":{"description":"the new value (add and replace)"}}}}}}`))

func mustCompact(s string) []byte {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		panic("pipeline: patch schema: " + err.Error())
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("pipeline: patch schema: " + err.Error())
	}
	return b
}

// PatchSchema returns the output schema a patch repair sends.
func PatchSchema() json.RawMessage { return patchSchema }

// outputSchema returns the schema a call of strategy asks for: the patch
// schema for a patch repair, else the record's schema.
func (e *Extractor) outputSchema(in Input, strategy string) json.RawMessage {
	if strategy == RepairPatch {
		return patchSchema
	}
	return in.Schema.ModelSchema()
}

// request builds the chat request of one call. strategy is "" for the
// extraction, else the repair's: a patch repair asks for the patch schema
// (response_format) or the patch tool (tools), never the record's. The
// token-limit field and the tool_choice form follow the provider's
// Features.
func (e *Extractor) request(msgs []openai.ChatCompletionMessage, in Input, strategy string) openai.ChatCompletionRequest {
	req := openai.ChatCompletionRequest{Model: e.cfg.Model, Messages: msgs}
	switch e.feats.TokenLimit {
	case TokenLimitMaxTokens:
		req.MaxTokens = e.cfg.MaxCompletionTokens
	default:
		req.MaxCompletionTokens = e.cfg.MaxCompletionTokens
	}
	schema := e.outputSchema(in, strategy)
	name, format := toolName, in.Schema.ID
	desc := "Record the " + in.Schema.Title + " extracted from the message."
	if strategy == RepairPatch {
		name, format = patchToolName, patchFormatName
		desc = "Record the JSON Patch (RFC 6902) operations that fix the listed errors in your previous " + in.Schema.Title + "."
	}
	switch e.cfg.RequestMode {
	case ModeTools:
		req.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: name, Description: desc, Parameters: schema,
		}}}
		switch e.feats.ToolChoice {
		case ToolChoiceRequired:
			req.ToolChoice = "required"
		case ToolChoiceOmitted:
		default:
			req.ToolChoice = openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: name}}
		}
	default:
		if !e.feats.JSONSchema {
			req.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
			break
		}
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: format, Schema: schema},
		}
	}
	return req
}
