package provider

import (
	"context"

	openai "github.com/sashabaranov/go-openai"
)

// Chat is go-openai's chat client over a Transport, each reply decoded
// once. The Transport decodes every 2xx chat completion to check it
// (checkCompletion) and go-openai decodes the same bytes again, with the
// same decoder into the same type: under Chat, the Transport keeps the
// value it decoded and hands go-openai an empty object in the body's
// place, and Chat returns the kept value with the reply's headers. What
// go-openai builds and sends, and every error, are its own, unchanged.
//
// A reply that did not pass through the check (another client, a 3xx, an
// event stream) comes back as go-openai decoded it. Safe for concurrent
// use.
type Chat struct{ c *openai.Client }

// NewChat returns c as a Chat. c's HTTPClient must send through a
// Transport (Transport.Client) for the single decoding; any other sends
// as c does.
func NewChat(c *openai.Client) *Chat { return &Chat{c: c} }

// decodedKey is the context key of the *decoded a Chat call waits on.
type decodedKey struct{}

// decoded is where the Transport leaves the chat completion it decoded
// for one Chat call.
type decoded struct {
	resp openai.ChatCompletionResponse
	ok   bool
}

// CreateChatCompletion is go-openai's CreateChatCompletion with the reply
// decoded once (see Chat).
func (c *Chat) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	d := &decoded{}
	resp, err := c.c.CreateChatCompletion(context.WithValue(ctx, decodedKey{}, d), req)
	if err != nil || !d.ok {
		return resp, err
	}
	d.resp.SetHeader(resp.Header())
	return d.resp, nil
}

// keepDecoded returns the slot of a Chat call in ctx, or nil.
func keepDecoded(ctx context.Context) *decoded {
	d, _ := ctx.Value(decodedKey{}).(*decoded)
	return d
}
