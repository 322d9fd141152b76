package provider

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestChatDecodesAsGoOpenAI sends the same replies, odd ones above all,
// through Chat and through go-openai's own client on the same kind of
// Transport, and checks that both give the same response (every field,
// the headers included) or the same error class, status and body: Chat
// changes how often a reply is decoded, never what it decodes to or how a
// failure is classified.
func TestChatDecodesAsGoOpenAI(t *testing.T) {
	t.Parallel()
	js := map[string]string{"Content-Type": "application/json", "X-Request-Id": "r1"}
	for _, tc := range []struct {
		name string
		rep  reply
	}{
		{"Plain", ok()},
		{"LeadingAndTrailingSpace", reply{status: 200, header: js, body: "\n\t " + okBody + " \n"}},
		{"ASecondValueAfter", reply{status: 200, header: js, body: okBody + `{"choices":[]}`}},
		{"TrailingGarbage", reply{status: 200, header: js, body: okBody + "<html>"}},
		{"UnknownFields", reply{status: 200, header: js, body: `{"choices":[{"index":0,"message":{"role":"assistant","content":"x","extra":[1,{"a":null}]},` +
			`"finish_reason":"stop","logprobs":null}],"timings":{"n":1},"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`}},
		{"NullsEverywhere", reply{status: 200, header: js, body: `{"id":null,"choices":[{"message":{"role":"assistant","content":null,"tool_calls":null},"finish_reason":null}],"usage":null}`}},
		{"ToolArgumentsAsObject", reply{status: 200, header: js, body: llamaCppObjectArguments}},
		{"ContentAsParts", reply{status: 200, header: js, body: `{"choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"hi"}]}}]}`}},
		{"RefusalAndReasoning", reply{status: 200, header: js, body: `{"choices":[{"message":{"role":"assistant","content":"","refusal":"no","reasoning_content":"because"},"finish_reason":"stop"}]}`}},
		{"NoChoices", reply{status: 200, header: js, body: `{"object":"chat.completion","choices":[]}`}},
		{"ChoicesNotAnArray", reply{status: 200, header: js, body: `{"choices":"many"}`}},
		{"WrongTypeDeepInside", reply{status: 200, header: js, body: `{"choices":[{"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":"five"}}`}},
		{"Truncated", reply{status: 200, header: js, body: okBody[:len(okBody)/2]}},
		{"HTMLPage", reply{status: 200, header: map[string]string{"Content-Type": "text/html"}, body: "<html>Welcome to the hotel wifi</html>"}},
		{"Array", reply{status: 200, header: js, body: `[` + okBody + `]`}},
		{"Empty", reply{status: 200, header: js, body: ""}},
		{"BadRequest", jsonErr(400, "context_length_exceeded", "invalid_request_error", "too long")},
		{"ProxyPage", reply{status: 502, body: "<html>Bad gateway</html>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg := testConfig()
			cfg.MaxRetries = 0
			plain := setup(t, cfg, newScript(t, tc.rep), "")
			chat := setup(t, cfg, newScript(t, tc.rep), "")
			direct := setup(t, cfg, newScript(t, tc.rep), "")
			want, werr := plain.client.CreateChatCompletion(ctx, chatRequest(16))
			got, gerr := NewChat(chat.client).CreateChatCompletion(ctx, chatRequest(16))
			dgot, derr := NewChatClient(direct.tr, direct.srv.srv.URL+"/v1/", "test-key").CreateChatCompletion(ctx, chatRequest(16))
			// The test servers stamp each reply with the second it was
			// sent (Date), which two calls need not share.
			for _, r := range []openai.ChatCompletionResponse{want, got, dgot} {
				r.Header().Del("Date")
			}
			// NewChatClient's Chat sends what go-openai sends and gives what
			// NewChat's gives, errors included (their text names the URL).
			if direct.srv.bodies[0] != plain.srv.bodies[0] {
				t.Fatalf("body sent\n%s\ngo-openai's\n%s", direct.srv.bodies[0], plain.srv.bodies[0])
			}
			if (gerr == nil) != (derr == nil) || (gerr != nil && strings.ReplaceAll(derr.Error(), direct.srv.srv.URL, "U") !=
				strings.ReplaceAll(gerr.Error(), chat.srv.srv.URL, "U")) || reflect.TypeOf(gerr) != reflect.TypeOf(derr) {
				t.Fatalf("error %v under NewChatClient, %v under NewChat", derr, gerr)
			}
			if gerr == nil && !reflect.DeepEqual(dgot, got) {
				t.Fatalf("response under NewChatClient\n%+v\nunder NewChat\n%+v", dgot, got)
			}
			if Class(werr) != Class(gerr) || (werr == nil) != (gerr == nil) {
				t.Fatalf("error %v (class %q) under Chat, %v (class %q) under go-openai", gerr, Class(gerr), werr, Class(werr))
			}
			if werr != nil {
				var wp, gp *Error
				if errors.As(werr, &wp) != errors.As(gerr, &gp) || (wp != nil && (wp.StatusCode != gp.StatusCode ||
					string(wp.Body) != string(gp.Body) || wp.Message != gp.Message)) {
					t.Fatalf("error %+v under Chat, %+v under go-openai", gp, wp)
				}
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("response under Chat\n%+v\nunder go-openai\n%+v", got, want)
			}
			// The reply was decoded once: go-openai saw the empty object.
			d := &decoded{}
			seen, err := chat.client.CreateChatCompletion(context.WithValue(ctx, decodedKey{}, d), chatRequest(16))
			if err != nil || !d.ok || len(seen.Choices) != 0 || !reflect.DeepEqual(d.resp.Choices, want.Choices) {
				t.Fatalf("under Chat go-openai decoded %+v (error %v), the Transport kept %v", seen, err, d.ok)
			}
			if got.Header().Get("X-Request-Id") != want.Header().Get("X-Request-Id") || len(got.Header()) == 0 {
				t.Fatalf("headers %v under Chat, %v under go-openai", got.Header(), want.Header())
			}
		})
	}
}

// TestChatWithoutTheTransport checks that Chat over a client that does not
// send through a Transport gives go-openai's own decoding.
func TestChatWithoutTheTransport(t *testing.T) {
	t.Parallel()
	srv := newScript(t, ok())
	oc := openai.DefaultConfig("test-key")
	oc.BaseURL = srv.srv.URL + "/v1"
	resp, err := NewChat(openai.NewClientWithConfig(oc)).CreateChatCompletion(context.Background(), chatRequest(16))
	if err != nil || len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "{}" || resp.Usage.PromptTokens != 5 {
		t.Fatalf("response %+v, error %v", resp, err)
	}
}
