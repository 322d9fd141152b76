package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Chat is a chat-completions client whose reply is decoded once. The
// Transport decodes every 2xx chat completion to check it
// (checkCompletion); under Chat it keeps the value it decoded and Chat
// returns it with the reply's headers, instead of a second decoding of the
// same bytes into the same type.
//
// Made by NewChatClient, Chat also writes the request itself: the body
// go-openai would send, byte for byte (encodeRequest), and go-openai's
// headers, sent through the Transport's http.Client (redirects as
// net/http follows them); its errors are go-openai's, and a request
// go-openai refuses before sending (a streaming request, a completions-only
// model, reasoning parameters a model does not take) goes through
// go-openai. Made by NewChat, the request is go-openai's.
//
// A reply that did not pass through the check (another client, a 3xx, an
// event stream) comes back as go-openai decodes it. Safe for concurrent
// use.
type Chat struct {
	c *openai.Client

	// Set by NewChatClient.
	hc     *http.Client
	url    string // base URL + /chat/completions
	bearer string // "Bearer <key>", or "" without a key
}

// NewChat returns c as a Chat. c's HTTPClient must send through a
// Transport (Transport.Client) for the single decoding; any other sends
// as c does.
func NewChat(c *openai.Client) *Chat { return &Chat{c: c} }

// NewChatClient returns a Chat that sends through t to the
// OpenAI-compatible API at baseURL (".../v1"), with apiKey as the bearer
// token ("" sends no Authorization header), as go-openai's client with
// openai.DefaultConfig(apiKey), that BaseURL and t.Client() would.
func NewChatClient(t *Transport, baseURL, apiKey string) *Chat {
	baseURL = strings.TrimRight(baseURL, "/")
	oc := openai.DefaultConfig(apiKey)
	oc.BaseURL = baseURL
	oc.HTTPClient = t.Client()
	c := &Chat{c: openai.NewClientWithConfig(oc), hc: t.Client(), url: baseURL + "/chat/completions"}
	if apiKey != "" {
		c.bearer = "Bearer " + apiKey
	}
	return c
}

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
	ctx = context.WithValue(ctx, decodedKey{}, d)
	if c.hc == nil || req.Stream || chatRefusedModels[req.Model] {
		resp, err := c.c.CreateChatCompletion(ctx, req)
		if err != nil || !d.ok {
			return resp, err
		}
		d.resp.SetHeader(resp.Header())
		return d.resp, nil
	}
	return c.send(ctx, d, req)
}

// send is go-openai's CreateChatCompletion (chat.go, client.go: the
// checks before sending, newRequest, sendRequest and decodeResponse) with
// the body from encodeRequest.
func (c *Chat) send(ctx context.Context, d *decoded, req openai.ChatCompletionRequest) (response openai.ChatCompletionResponse, err error) {
	if err = openai.NewReasoningValidator().Validate(req); err != nil {
		return response, err
	}
	body, err := encodeRequest(req)
	if err != nil {
		return response, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, nil)
	if err != nil {
		return response, err
	}
	sb := &sentBody{b: body}
	hr.Body, hr.ContentLength = sb, int64(len(body))
	hr.GetBody = func() (io.ReadCloser, error) { return &sentBody{b: body}, nil }
	h := make(http.Header, 3)
	if c.bearer != "" {
		h["Authorization"] = []string{c.bearer}
	}
	h["Accept"] = jsonMediaType
	h["Content-Type"] = jsonMediaType
	hr.Header = h
	res, err := c.hc.Do(hr)
	if err != nil {
		return response, err
	}
	defer res.Body.Close()
	if d.ok {
		d.resp.SetHeader(res.Header)
		return d.resp, nil
	}
	response.SetHeader(res.Header)
	if res.StatusCode < http.StatusOK || res.StatusCode >= http.StatusBadRequest {
		return response, errorResponse(res)
	}
	return response, json.NewDecoder(res.Body).Decode(&response)
}

// jsonMediaType is the Accept and Content-Type value go-openai sends.
var jsonMediaType = []string{"application/json"}

// errorResponse is go-openai's handleErrorResp (client.go): a failure
// status the Transport let through (it turns every 4xx and 5xx into a
// *Error, so only a client without it gets here).
func errorResponse(res *http.Response) error {
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("error, reading response body: %w", err)
	}
	var errRes openai.ErrorResponse
	err = json.Unmarshal(body, &errRes)
	if err != nil || errRes.Error == nil {
		reqErr := &openai.RequestError{HTTPStatus: res.Status, HTTPStatusCode: res.StatusCode, Err: err, Body: body}
		if errRes.Error != nil {
			reqErr.Err = errRes.Error
		}
		return reqErr
	}
	errRes.Error.HTTPStatus = res.Status
	errRes.Error.HTTPStatusCode = res.StatusCode
	return errRes.Error
}

// chatRefusedModels are the models go-openai refuses for chat
// completions (ErrChatCompletionInvalidModel; completion.go,
// disabledModelsForEndpoints["/chat/completions"], go-openai v1.43.0;
// TestChatClientSendsAsGoOpenAI checks go-openai refuses each): their
// calls go through go-openai, which returns that error.
var chatRefusedModels = map[string]bool{
	"code-davinci-002": true, "code-cushman-001": true, "code-davinci-001": true,
	"text-davinci-003": true, "text-davinci-002": true, "text-curie-001": true,
	"text-babbage-001": true, "text-ada-001": true, "text-davinci-001": true,
	"davinci-instruct-beta": true, "davinci": true, "curie-instruct-beta": true,
	"curie": true, "ada": true, "babbage": true,
}

// sentBody is a request body Chat wrote: the Transport takes its bytes
// as they are instead of reading a copy (readBody).
type sentBody struct {
	b   []byte
	off int
}

func (s *sentBody) Read(p []byte) (int, error) {
	if s.off >= len(s.b) {
		return 0, io.EOF
	}
	n := copy(p, s.b[s.off:])
	s.off += n
	return n, nil
}

func (s *sentBody) Close() error { return nil }

// keepDecoded returns the slot of a Chat call in ctx, or nil.
func keepDecoded(ctx context.Context) *decoded {
	d, _ := ctx.Value(decodedKey{}).(*decoded)
	return d
}
