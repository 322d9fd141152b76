package provider

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// completionBodies are chat completions of the shapes providers send,
// and odd ones.
var completionBodies = []string{
	okBody,
	llamaCppObjectArguments, // left to encoding/json, which fails: the Transport rewrites the arguments first
	// OpenAI's (API reference example) with the fields it adds.
	`{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"{\"intent\":\"missing\",\"note\":\"caf\u00e9 \\u00e9 \\ud83d\\ude00 <b>\"}",` +
		`"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,` +
		`"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,` +
		`"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`,
	// Tools mode, the arguments a string, an index on the call.
	`{"id":"c2","object":"chat.completion","created":2,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
		`"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"record_extraction","arguments":"{\"a\":1}"}}]},` +
		`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":null}}`,
	// vLLM's extras.
	"{\n  \"id\": \"cmpl-1\", \"object\": \"chat.completion\", \"created\": 3, \"model\": \"qwen\",\n  \"choices\": [ { \"index\": 0, " +
		"\"message\": { \"role\": \"assistant\", \"reasoning_content\": \"think\", \"content\": \"{}\", \"tool_calls\": [] }, " +
		"\"logprobs\": null, \"finish_reason\": \"stop\", \"stop_reason\": null } ],\n  \"usage\": { \"prompt_tokens\": 1, " +
		"\"total_tokens\": 2, \"completion_tokens\": 1, \"prompt_tokens_details\": null }, \"prompt_logprobs\": null, " +
		"\"kv_transfer_params\": {\"a\": [1, -2.5e3, true, false, null, \"x\\\"y\", {}, []]}\n}",
	`{"choices":[{"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":"five"}}`,
	`{"choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"hi"}]}}]}`,
	`{"id":null,"choices":[{"message":{"role":"assistant","content":null,"tool_calls":null},"finish_reason":null}],"usage":null}`,
	`{"choices":[{"message":null},null]}`,
	`{"choices":[{"message":{"role":"assistant","Content":"upper"}}]}`,
	`{"choices":[{"message":{"role":"assistant","content":"a","content":"b"}}]}`,
	`{"choices":[{"message":{"role":"a"},"message":{"content":"b"}}]}`,
	`{"choices":[{"message":{"role":"assistant","content":"bad \ud800 and \udc00\u0041 \xff\xfe"}}],"created":-0}`,
	`{"choices":[{"index":1.0,"message":{"role":"assistant"}}]}`,
	`{"choices":[{"index":1e2,"message":{"role":"assistant"}}]}`,
	`{"choices":[{"index":99999999999999999999,"message":{"role":"assistant"}}]}`,
	`{"choices":[{"message":{"role":"assistant","content":"x"}}]} {"choices":[]}`,
	`{"choices":[{"message":{"role":"assistant","content":"x"},"logprobs":{"content":[]}}]}`,
	`{"choices":[],"prompt_filter_results":[]}`,
	`{"choices":[{"message":{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}}]}`,
	`{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":{"a":1}}}]}}]}`,
	`{"choices":[{"message":{"role":"assistant","MultiContent":[]}}]}`,
	`{"choices":[{"message":{"role":"assistant","ſervice":1}}],"ſervice_tier":"x","K":1}`,
	`{"a":{"b":{"c":{"d":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}},"choices":[]}`,
}

// slowDecode is checkCompletion's decoding without decodeCompletion:
// go-openai's (encoding/json's Decoder).
func slowDecode(t []byte) (openai.ChatCompletionResponse, error) {
	var c openai.ChatCompletionResponse
	err := json.NewDecoder(bytes.NewReader(t)).Decode(&c)
	return c, err
}

// agrees checks decodeCompletion against encoding/json on body: when it
// decodes body, encoding/json decodes it without an error to the same
// value.
func agrees(t *testing.T, body []byte) (decoded bool) {
	t.Helper()
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return false
	}
	got, ok := decodeCompletion(trimmed)
	if !ok {
		return false
	}
	want, err := slowDecode(trimmed)
	if err != nil {
		t.Fatalf("decoded here, encoding/json fails (%v):\n%q", err, body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded here as\n%#v\nencoding/json decodes\n%#v\nfrom %q", got, want, body)
	}
	return true
}

// TestDecodeCompletionAsEncodingJSON holds decodeCompletion to
// encoding/json's decoding into go-openai's type: on the bodies above and
// on random mutations of them, whatever it decodes, encoding/json decodes
// alike and without error (and the common shapes are decoded here).
func TestDecodeCompletionAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for i, b := range completionBodies {
		d := agrees(t, []byte(b))
		if (i == 0 || (i >= 2 && i < 5)) && !d {
			t.Errorf("body %d (a common shape) left to encoding/json: %s", i, b)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]:,"\ 0123456789-+.eEtruefalsnul/bfnrtu"ABCDEFabcdef` + "\x00\x1f\x7f\xc3\xa9\xff\t\n")
	decoded, total := 0, 0
	for _, b := range completionBodies {
		for range 3000 {
			m := []byte(b)
			for range 1 + r.IntN(3) {
				if len(m) == 0 {
					break
				}
				p := r.IntN(len(m))
				switch r.IntN(3) {
				case 0:
					m[p] = alphabet[r.IntN(len(alphabet))]
				case 1:
					m = append(m[:p], m[p+1:]...)
				default:
					m = append(m[:p], append([]byte{alphabet[r.IntN(len(alphabet))]}, m[p:]...)...)
				}
			}
			total++
			if agrees(t, m) {
				decoded++
			}
		}
	}
	t.Logf("%d of %d mutated bodies decoded here, all as encoding/json decodes them", decoded, total)
}

// BenchmarkDecodeCompletion compares go-openai's decoding of a chat
// completion (encoding/json's Decoder) with decodeCompletion's.
func BenchmarkDecodeCompletion(b *testing.B) {
	body := []byte(completionBodies[2])
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := slowDecode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeCompletion", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeCompletion(body); !ok {
				b.Fatal("not decoded")
			}
		}
	})
}
