package pipeline

import (
	openai "github.com/sashabaranov/go-openai"
)

// toolName is the one tool of a tools-mode request.
const toolName = "record_extraction"

// request builds the chat request of one call. The token-limit field and
// the tool_choice form follow the provider's Features.
func (e *Extractor) request(msgs []openai.ChatCompletionMessage, in Input) openai.ChatCompletionRequest {
	req := openai.ChatCompletionRequest{Model: e.cfg.Model, Messages: msgs}
	switch e.feats.TokenLimit {
	case TokenLimitMaxTokens:
		req.MaxTokens = e.cfg.MaxCompletionTokens
	default:
		req.MaxCompletionTokens = e.cfg.MaxCompletionTokens
	}
	schema := in.Schema.ModelSchema()
	switch e.cfg.RequestMode {
	case ModeTools:
		req.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: toolName, Description: "Record the " + in.Schema.Title + " extracted from the message.", Parameters: schema,
		}}}
		switch e.feats.ToolChoice {
		case ToolChoiceRequired:
			req.ToolChoice = "required"
		case ToolChoiceOmitted:
		default:
			req.ToolChoice = openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: toolName}}
		}
	default:
		if !e.feats.JSONSchema {
			req.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
			break
		}
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: in.Schema.ID, Schema: schema},
		}
	}
	return req
}
