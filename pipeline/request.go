package pipeline

import (
	"encoding/json"
	"strings"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
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
// wrapper. strictPatchSchema is its strict-mode form: OpenAI's subset needs
// every property required and a type on every value, so value is required
// (ignored on remove) and is a string, number, boolean, null or an array of
// those; an object cannot be a patch value there.
var (
	patchSchema       = json.RawMessage(mustCompact(patchSchemaJSON(false)))
	strictPatchSchema = json.RawMessage(mustCompact(patchSchemaJSON(true)))
)

func patchSchemaJSON(strict bool) string {
	value := `{"description":"the new value (add and replace)"}`
	required := `["op","path"]`
	if strict {
		scalar := `{"type":"string"},{"type":"number"},{"type":"boolean"},{"type":"null"}`
		value = `{"description":"the new value (add and replace; null on remove)","anyOf":[` + scalar +
			`,{"type":"array","items":{"anyOf":[` + scalar + `]}}]}`
		required = `["op","path","value"]`
	}
	return `{"type":"object","additionalProperties":false,"required":["operations"],"properties":{"operations":{` +
		`"type":"array","maxItems":32,"description":"RFC 6902 operations against your previous JSON",` +
		`"items":{"type":"object","additionalProperties":false,"required":` + required + `,"properties":{` +
		`"op":{"type":"string","enum":["add","remove","replace"]},` +
		`"path":{"type":"string","description":"JSON Pointer of the field to change"},` +
		`"value":` + value + `}}}}}`
}

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

// PatchSchema returns the output schema a patch repair sends, in the form
// strict mode sends (strict) or the plain one.
func PatchSchema(strict bool) json.RawMessage {
	if strict {
		return strictPatchSchema
	}
	return patchSchema
}

// sentSchema is what the extractor sends for one schema, computed once
// per schema (see Extractor.Prepare).
type sentSchema struct {
	// record is the record's schema as sent: ModelSchema, or its strict
	// form under a strict provider.
	record json.RawMessage
	// dropped are the keywords the strict form left out.
	dropped []DroppedKeyword
	// addedNull: the strict form made some optional property nullable.
	addedNull bool
	// placeholder stands for record under ExtractorConfig.FixedParts (nil
	// without).
	placeholder json.RawMessage
}

// Prepare computes what the extractor sends for s and, when the provider
// has strict mode, logs at info one line naming the keywords the strict
// form drops and where (the validator still checks them). Call it at
// start-up for each schema; Process does it on a schema's first use
// otherwise. Safe for concurrent use.
func (e *Extractor) Prepare(s *Schema) { e.sent(s) }

func (e *Extractor) sent(s *Schema) *sentSchema {
	if v, ok := e.schemas.Load(s); ok {
		return v.(*sentSchema)
	}
	ss := &sentSchema{record: s.ModelSchema()}
	if e.feats.Strict {
		var m map[string]any
		if err := json.Unmarshal(s.ModelSchema(), &m); err == nil {
			conv, dropped, added := StrictSchema(m)
			if b, err := json.Marshal(conv); err == nil {
				ss.record, ss.dropped, ss.addedNull = b, dropped, added
			}
		}
	}
	if e.cfg.FixedParts != nil {
		// Keyed by the bytes: each schema, rendering and form its own.
		if p, err := e.cfg.FixedParts.Placeholder(ss.record); err == nil {
			ss.placeholder = p
		}
	}
	v, loaded := e.schemas.LoadOrStore(s, ss)
	if !loaded && e.feats.Strict {
		names := make([]string, len(ss.dropped))
		for i, d := range ss.dropped {
			names[i] = d.String()
		}
		e.log.Info("schema sent in the strict subset; dropped keywords are still checked by the validator",
			zap.String("schema", s.ID), zap.String("schema_version", s.Version), zap.String("provider", e.cfg.Provider),
			zap.Int("dropped_count", len(names)), zap.String("dropped", strings.Join(names, "; ")))
	}
	return v.(*sentSchema)
}

// outputSchema returns the schema a call of strategy asks for: the patch
// schema for a patch repair, else the record's schema as sent.
func (e *Extractor) outputSchema(in Input, strategy string) json.RawMessage {
	if strategy == RepairPatch {
		return PatchSchema(e.feats.Strict)
	}
	return e.sent(in.Schema).record
}

// sentOutputSchema is outputSchema as the request carries it: its
// placeholder under ExtractorConfig.FixedParts.
func (e *Extractor) sentOutputSchema(in Input, strategy string) json.RawMessage {
	if e.cfg.FixedParts == nil {
		return e.outputSchema(in, strategy)
	}
	if strategy == RepairPatch {
		if e.patchPlaceholder != nil {
			return e.patchPlaceholder
		}
		return PatchSchema(e.feats.Strict)
	}
	if ss := e.sent(in.Schema); ss.placeholder != nil {
		return ss.placeholder
	}
	return e.sent(in.Schema).record
}

// request builds the chat request of one call. strategy is "" for the
// extraction, else the repair's: a patch repair asks for the patch schema
// (response_format) or the patch tool (tools), never the record's. The
// token-limit field, strict, the tool_choice form and parallel_tool_calls
// follow the provider's Features.
func (e *Extractor) request(msgs []openai.ChatCompletionMessage, in Input, strategy string) openai.ChatCompletionRequest {
	req := openai.ChatCompletionRequest{Model: e.cfg.Model, Messages: msgs}
	switch e.feats.TokenLimit {
	case TokenLimitMaxTokens:
		//lint:ignore SA1019 Ollama and llama.cpp server read max_tokens only (pipeline/providers.go)
		req.MaxTokens = e.cfg.MaxCompletionTokens
	default:
		req.MaxCompletionTokens = e.cfg.MaxCompletionTokens
	}
	schema := e.sentOutputSchema(in, strategy)
	name, format := toolName, in.Schema.ID
	desc := "Record the " + in.Schema.Title + " extracted from the message."
	if strategy == RepairPatch {
		name, format = patchToolName, patchFormatName
		desc = "Record the JSON Patch (RFC 6902) operations that fix the listed errors in your previous " + in.Schema.Title + "."
	}
	switch e.cfg.RequestMode {
	case ModeTools:
		req.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: name, Description: desc, Strict: e.feats.Strict, Parameters: schema,
		}}}
		if e.feats.NoParallelToolCalls {
			req.ParallelToolCalls = false
		}
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
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: format, Schema: schema, Strict: e.feats.Strict},
		}
	}
	return req
}
