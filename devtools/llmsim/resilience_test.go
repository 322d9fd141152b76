package llmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
)

// post sends body to the chat endpoint over raw HTTP, where headers matter.
func (b *testBundle) post(t *testing.T, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(b.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

func requestBody(t *testing.T, text string) []byte {
	t.Helper()
	b, err := json.Marshal(formatRequest(extractionMessages(text)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openAIError decodes an OpenAI error body.
func openAIError(t *testing.T, data []byte) apiErrorBody {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(data, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body %s is not an OpenAI error (%v)", data, err)
	}
	return e.Error
}

func TestLatency(t *testing.T) {
	t.Parallel()

	t.Run("LogNormalQuantiles", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ median, p99 time.Duration }{
			{200 * time.Millisecond, 2 * time.Second},
			{800 * time.Millisecond, 1200 * time.Millisecond},
			{5 * time.Millisecond, 400 * time.Millisecond},
		} {
			rng := rand.New(rand.NewPCG(1, 2))
			const n = 100_000
			d := make([]time.Duration, n)
			for i := range d {
				d[i] = logNormal(tc.median, tc.p99, rng.NormFloat64())
			}
			slices.Sort(d)
			med, p99 := d[n/2], d[n*99/100]
			if r := float64(med) / float64(tc.median); math.Abs(r-1) > 0.02 {
				t.Errorf("median %v, want %v ±2%%", med, tc.median)
			}
			if r := float64(p99) / float64(tc.p99); math.Abs(r-1) > 0.05 {
				t.Errorf("p99 %v, want %v ±5%%", p99, tc.p99)
			}
		}
	})

	t.Run("Edges", func(t *testing.T) {
		t.Parallel()
		if d := logNormal(100*time.Millisecond, 0, 3); d != 100*time.Millisecond {
			t.Errorf("p99 unset: %v, want the median", d)
		}
		if d := logNormal(0, time.Second, 1); d != 0 {
			t.Errorf("median 0: %v, want 0", d)
		}
		if d := logNormal(time.Second, time.Minute, 40); d != time.Hour {
			t.Errorf("far tail: %v, want the one-hour cap", d)
		}
		if d := logNormal(time.Second, 10*time.Second, z99); math.Abs(float64(d)/float64(10*time.Second)-1) > 1e-4 {
			t.Errorf("at z99: %v, want the p99", d)
		}
	})

	t.Run("SeededPerTry", func(t *testing.T) {
		t.Parallel()
		cfg := config.Simulator{Seed: 3, LatencyMedian: 100 * time.Millisecond, LatencyP99: time.Second}
		a, b := New(cfg, nil), New(cfg, nil)
		digest := [32]byte{1}
		d1 := a.latency(a.tryRand(digest, 1, "latency"))
		if d := b.latency(b.tryRand(digest, 1, "latency")); d != d1 {
			t.Errorf("same seed, body and try: %v and %v", d1, d)
		}
		if d := a.latency(a.tryRand(digest, 2, "latency")); d == d1 {
			t.Errorf("the second try drew the first try's latency %v", d)
		}
		fixed := New(config.Simulator{Latency: 100 * time.Millisecond}, nil)
		for try := range uint32(50) {
			if d := fixed.latency(fixed.tryRand(digest, try, "latency")); d < 50*time.Millisecond || d > 150*time.Millisecond {
				t.Fatalf("fixed latency drew %v, want [50ms, 150ms]", d)
			}
		}
	})

	t.Run("ServedAndCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7, LatencyMedian: 20 * time.Millisecond, LatencyP99: 21 * time.Millisecond})
		start := time.Now()
		b.call(t, formatRequest(extractionMessages(textOrder)))
		if d := time.Since(start); d < 15*time.Millisecond {
			t.Errorf("call took %v; want about the 20ms median", d)
		}
		slow := setup(t, config.Simulator{Seed: 7, LatencyMedian: time.Minute, LatencyP99: 2 * time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := slow.client.CreateChatCompletion(ctx, formatRequest(extractionMessages(textOrder))); err == nil {
			t.Fatal("call with a 50ms deadline against a 1m latency succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cancelled call took %v", d)
		}
	})
}

func TestTransportFaults(t *testing.T) {
	t.Parallel()

	t.Run("RateLimited", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, RateLimitedRate: 1, RetryAfter: 1500 * time.Millisecond, RequestsPerMinute: 100})
		resp, data := b.post(t, requestBody(t, textOrder))
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429: %s", resp.StatusCode, data)
		}
		if ra, ms := resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"); ra != "2" || ms != "1500" {
			t.Errorf("Retry-After %q retry-after-ms %q, want 2 and 1500", ra, ms)
		}
		if e := openAIError(t, data); e.code() != "rate_limit_exceeded" || e.Type != "requests" {
			t.Errorf("error type %q code %q, want requests / rate_limit_exceeded", e.Type, e.code())
		}
		if f := resp.Header.Get("X-Llmsim-Fault"); f != string(FaultRateLimited) {
			t.Errorf("X-Llmsim-Fault %q", f)
		}
		if l := resp.Header.Get("x-ratelimit-limit-requests"); l != "100" {
			t.Errorf("x-ratelimit-limit-requests %q, want 100", l)
		}
		_, err := b.client.CreateChatCompletion(context.Background(), formatRequest(extractionMessages(textOrder)))
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
			t.Errorf("client err = %#v, want a 429 *openai.APIError", err)
		}
		// Repairs alike.
		doc, lines := damaged(t)
		_, err = b.client.CreateChatCompletion(context.Background(), formatRequest(repairMessages(compactJSON(doc), lines)))
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 429 {
			t.Errorf("repair err = %v, want 429", err)
		}
	})

	t.Run("RetryAfterDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{RateLimitedRate: 1})
		resp, _ := b.post(t, requestBody(t, textOrder))
		if ra, ms := resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"); ra != "1" || ms != "1000" {
			t.Errorf("Retry-After %q retry-after-ms %q, want 1 and 1000", ra, ms)
		}
	})

	t.Run("ServerError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, ServerErrorRate: 1})
		resp, data := b.post(t, requestBody(t, textOrder))
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("status %d, want 500: %s", resp.StatusCode, data)
		}
		if e := openAIError(t, data); e.Type != "server_error" || e.Code != nil {
			t.Errorf("error type %q code %v, want server_error / null", e.Type, e.Code)
		}
		_, err := b.client.CreateChatCompletion(context.Background(), formatRequest(extractionMessages(textOrder)))
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 500 {
			t.Errorf("client err = %v, want a 500 *openai.APIError", err)
		}
	})

	t.Run("ForbiddenHTML", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, ForbiddenHTMLRate: 1, RequestsPerMinute: 100})
		resp, data := b.post(t, requestBody(t, textOrder))
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403: %s", resp.StatusCode, data)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("Content-Type %q, want text/html", ct)
		}
		if !strings.HasPrefix(string(data), "<html>") || json.Valid(data) {
			t.Errorf("body is not an HTML page: %s", data)
		}
		if l := resp.Header.Get("x-ratelimit-limit-requests"); l != "" {
			t.Errorf("a proxy's page carries x-ratelimit-limit-requests %q", l)
		}
		_, err := b.client.CreateChatCompletion(context.Background(), formatRequest(extractionMessages(textOrder)))
		var reqErr *openai.RequestError
		if !errors.As(err, &reqErr) || reqErr.HTTPStatusCode != 403 {
			t.Errorf("client err = %#v, want a 403 *openai.RequestError", err)
		}
	})

	t.Run("RetrySucceeds", func(t *testing.T) {
		t.Parallel()
		cfg := config.Simulator{Seed: 5, RateLimitedRate: 0.3, ServerErrorRate: 0.1, ForbiddenHTMLRate: 0.1}
		statuses := func() [][]int {
			b := setup(t, cfg)
			var all [][]int
			for _, text := range allTexts {
				var seq []int
				for {
					_, err := b.client.CreateChatCompletion(context.Background(), formatRequest(extractionMessages(text)))
					if err == nil {
						seq = append(seq, 200)
						break
					}
					var apiErr *openai.APIError
					var reqErr *openai.RequestError
					switch {
					case errors.As(err, &apiErr):
						seq = append(seq, apiErr.HTTPStatusCode)
					case errors.As(err, &reqErr):
						seq = append(seq, reqErr.HTTPStatusCode)
					default:
						t.Fatalf("unexpected error %v", err)
					}
					if len(seq) == 30 {
						t.Fatalf("the same request failed 30 times: %v", seq)
					}
				}
				all = append(all, seq)
			}
			return all
		}
		first := statuses()
		faulted := 0
		for _, seq := range first {
			faulted += len(seq) - 1
		}
		if faulted == 0 {
			t.Errorf("no request failed at a 50%% fault rate: %v", first)
		}
		if again := statuses(); !slices.EqualFunc(first, again, slices.Equal) {
			t.Errorf("same seed, other outcomes: %v then %v", first, again)
		}
	})

	t.Run("TryHeader", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1})
		body := requestBody(t, textEmail)
		for want := 1; want <= 3; want++ {
			resp, _ := b.post(t, body)
			if got := resp.Header.Get("X-Llmsim-Try"); got != strconv.Itoa(want) {
				t.Errorf("X-Llmsim-Try %q, want %d", got, want)
			}
		}
		resp, _ := b.post(t, requestBody(t, textOrder))
		if got := resp.Header.Get("X-Llmsim-Try"); got != "1" {
			t.Errorf("another body: X-Llmsim-Try %q, want 1", got)
		}
	})
}

// rateHeaders are the x-ratelimit-* headers of one dimension.
func rateHeaders(t *testing.T, h http.Header, dim string) (limit, remaining int, reset time.Duration) {
	t.Helper()
	var err1, err2, err3 error
	limit, err1 = strconv.Atoi(h.Get("x-ratelimit-limit-" + dim))
	remaining, err2 = strconv.Atoi(h.Get("x-ratelimit-remaining-" + dim))
	reset, err3 = time.ParseDuration(h.Get("x-ratelimit-reset-" + dim))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("x-ratelimit-*-%s headers: %v (%v)", dim, err, h)
	}
	return limit, remaining, reset
}

func TestLimits(t *testing.T) {
	t.Parallel()

	t.Run("RequestsPerMinute", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, RequestsPerMinute: 3})
		start := time.Now()
		for i, text := range allTexts[:3] {
			resp, data := b.post(t, requestBody(t, text))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: status %d: %s", i+1, resp.StatusCode, data)
			}
			limit, remaining, reset := rateHeaders(t, resp.Header, "requests")
			if limit != 3 || remaining != 2-i || reset <= 0 || reset > time.Minute {
				t.Errorf("request %d: limit %d remaining %d reset %v, want 3 %d (0, 1m]", i+1, limit, remaining, reset, 2-i)
			}
			if h := resp.Header.Get("x-ratelimit-limit-tokens"); h != "" {
				t.Errorf("no token limit, yet x-ratelimit-limit-tokens %q", h)
			}
		}
		resp, data := b.post(t, requestBody(t, textItems))
		// The bucket refilled for as long as the four requests took (at most
		// el), so the reset and the retry are that much short of 1m and 20s.
		el := time.Since(start)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("4th request: status %d, want 429: %s", resp.StatusCode, data)
		}
		limit, remaining, reset := rateHeaders(t, resp.Header, "requests")
		if limit != 3 || remaining != 0 || reset > time.Minute || reset < time.Minute-el-time.Millisecond {
			t.Errorf("429: limit %d remaining %d reset %v, want 3 0 in [1m - %v, 1m]", limit, remaining, reset, el)
		}
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		ms, err2 := strconv.Atoi(resp.Header.Get("retry-after-ms"))
		if err != nil || err2 != nil || ms > 20_000 || int64(ms) < (20*time.Second-el).Milliseconds()-1 || ra != (ms+999)/1000 {
			t.Errorf("Retry-After %q retry-after-ms %q, want 20s (one request per 20s) less up to %v, in whole seconds rounded up",
				resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"), el)
		}
		if e := openAIError(t, data); e.code() != "rate_limit_exceeded" || e.Type != "requests" {
			t.Errorf("error type %q code %q", e.Type, e.code())
		}
		if st := b.sim.Stats(); st.Limited != 1 || st.ByStatus[429] != 1 || st.ByStatus[200] != 3 {
			t.Errorf("stats %+v", st)
		}
	})

	t.Run("TokensPerMinute", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, TokensPerMinute: 5000})
		body := requestBody(t, textOrder)
		resp, data := b.post(t, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
		var cr chatResponse
		if err := json.Unmarshal(data, &cr); err != nil {
			t.Fatal(err)
		}
		charged := cr.Usage.PromptTokens + 1024 // max_completion_tokens
		limit, remaining, _ := rateHeaders(t, resp.Header, "tokens")
		if limit != 5000 || remaining != 5000-charged {
			t.Errorf("limit %d remaining %d, want 5000 %d (prompt %d + 1024)", limit, remaining, 5000-charged, cr.Usage.PromptTokens)
		}
		// A limit of three calls and 50 tokens: the fourth call is refused
		// unless the calls took the 19s the bucket needs to refill the rest
		// of a call.
		b = setup(t, config.Simulator{Seed: 1, TokensPerMinute: 3*charged + 50})
		for range 3 {
			if resp, data := b.post(t, body); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d within the token limit: %s", resp.StatusCode, data)
			}
		}
		resp, data = b.post(t, body)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d beyond the token limit, want 429", resp.StatusCode)
		}
		if e := openAIError(t, data); e.Type != "tokens" || e.code() != "rate_limit_exceeded" {
			t.Errorf("error type %q code %q, want tokens / rate_limit_exceeded", e.Type, e.code())
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Error("no Retry-After")
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, TokensPerMinute: 500})
		resp, data := b.post(t, requestBody(t, textOrder))
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", resp.StatusCode)
		}
		if e := openAIError(t, data); !strings.HasPrefix(e.Message, "Request too large") {
			t.Errorf("message %q", e.Message)
		}
	})

	t.Run("HeadersOnSuccess", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, RequestsPerMinute: 600, TokensPerMinute: 1_000_000})
		resp, data := b.post(t, requestBody(t, textDispute))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
		if limit, remaining, reset := rateHeaders(t, resp.Header, "requests"); limit != 600 || remaining != 599 || reset != 100*time.Millisecond {
			t.Errorf("requests: %d %d %v, want 600 599 100ms", limit, remaining, reset)
		}
		if limit, remaining, reset := rateHeaders(t, resp.Header, "tokens"); limit != 1_000_000 || remaining >= limit || reset <= 0 {
			t.Errorf("tokens: %d %d %v", limit, remaining, reset)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Error("Retry-After on a 200")
		}
	})

	t.Run("NoLimits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1})
		resp, _ := b.post(t, requestBody(t, textDispute))
		for k := range resp.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-ratelimit-") {
				t.Errorf("header %s without limits", k)
			}
		}
	})

	t.Run("Bucket", func(t *testing.T) {
		t.Parallel()
		now := time.Unix(1000, 0)
		l := limiter{requests: newBucket(60, false), tokens: newBucket(600, false)}
		for i := range 60 {
			if d := l.take(now, 10); !d.ok {
				t.Fatalf("take %d refused", i+1)
			}
		}
		near := func(d, want time.Duration) bool { return (d - want).Abs() < time.Millisecond }
		d := l.take(now, 10)
		if d.ok || d.over != "requests" || !near(d.retryAfter, time.Second) {
			t.Fatalf("61st take: %+v, want refused for 1s", d)
		}
		if d.requests.remaining != 0 || d.tokens.remaining != 0 || !near(d.requests.reset, time.Minute) {
			t.Errorf("state %+v", d)
		}
		now = now.Add(1500 * time.Millisecond) // 1.5 requests and 15 tokens back
		if d := l.take(now, 20); d.ok || d.over != "tokens" || !near(d.retryAfter, 500*time.Millisecond) {
			t.Errorf("20 tokens after 1.5s: %+v, want refused on tokens for 500ms", d)
		}
		if d := l.take(now, 10); !d.ok || d.requests.remaining != 0 || d.tokens.remaining != 5 {
			t.Errorf("10 tokens after 1.5s: %+v", d)
		}
		if d := l.peek(now.Add(time.Hour)); d.requests.remaining != 60 || d.tokens.remaining != 600 || d.requests.reset != 0 {
			t.Errorf("after an hour: %+v, want full", d)
		}
	})

	t.Run("FormatReset", func(t *testing.T) {
		t.Parallel()
		for d, want := range map[time.Duration]string{
			0: "0s", time.Second: "1s", 250 * time.Millisecond: "250ms", 1234567 * time.Microsecond: "1.235s",
			6 * time.Minute: "6m0s", time.Microsecond: "1ms",
		} {
			if got := formatReset(d); got != want {
				t.Errorf("formatReset(%v) = %q, want %q", d, got, want)
			}
		}
	})
}

func TestAdmin(t *testing.T) {
	t.Parallel()

	admin := func(t *testing.T, b *testBundle, method, path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, b.url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode, v
	}

	t.Run("Outage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1})
		req := formatRequest(extractionMessages(textOrder))
		b.call(t, req)
		start := time.Now()
		if status, v := admin(t, b, "POST", "/admin/outage?seconds=60"); status != 200 || v["outage"] != true {
			t.Fatalf("start outage: %d %v", status, v)
		}
		_, err := b.client.CreateChatCompletion(context.Background(), req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 503 || apiErr.Type != "server_error" {
			t.Errorf("during the outage: %v, want a 503 *openai.APIError", err)
		}
		// Left: at least 60s less the time since the outage started, at most
		// 60s.
		if _, v := admin(t, b, "GET", "/admin/stats"); v["outage_remaining_ms"].(float64) > 60_000 ||
			v["outage_remaining_ms"].(float64) < float64((time.Minute-time.Since(start)).Milliseconds()-1) {
			t.Errorf("outage_remaining_ms %v, want 60s less the %v since the outage started", v["outage_remaining_ms"], time.Since(start))
		}
		if status, v := admin(t, b, "POST", "/admin/outage?seconds=0"); status != 200 || v["outage"] != false {
			t.Fatalf("end outage: %d %v", status, v)
		}
		b.call(t, req)
		for _, bad := range []string{"", "?seconds=-1", "?seconds=x", "?seconds=NaN", "?seconds=Inf"} {
			if status, _ := admin(t, b, "POST", "/admin/outage"+bad); status != 400 {
				t.Errorf("POST /admin/outage%s: %d, want 400", bad, status)
			}
		}
		if status, _ := admin(t, b, "GET", "/admin/outage"); status != 405 {
			t.Errorf("GET /admin/outage: %d, want 405", status)
		}
	})

	t.Run("OutageEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1})
		body := requestBody(t, textOrder)
		const outage = time.Second
		start := time.Now()
		b.sim.SetOutage(outage)
		// A call that returns within the outage was answered within it. (On a
		// machine so slow that the call returns later, it cannot tell.)
		if resp, _ := b.post(t, body); resp.StatusCode != 503 && time.Since(start) < outage {
			t.Fatalf("status %d %v into a 1s outage, want 503", resp.StatusCode, time.Since(start))
		}
		deadline := start.Add(outage + 10*time.Second)
		for {
			resp, _ := b.post(t, body)
			if resp.StatusCode == 200 {
				// Answered after the outage ended, so returned after it.
				if d := time.Since(start); d < outage {
					t.Fatalf("served %v into a 1s outage", d)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a 1s outage still answers %d after %v", resp.StatusCode, time.Since(start))
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("Stats", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, RequestsPerMinute: 2})
		var completion int64
		for _, text := range allTexts[:2] {
			resp, _ := b.call(t, formatRequest(extractionMessages(text)))
			completion += int64(resp.Usage.CompletionTokens)
		}
		b.post(t, requestBody(t, textEmail))             // 429: over the limit
		b.post(t, []byte(`{"model":"m","messages":[]}`)) // 400
		b.sim.SetOutage(time.Minute)
		b.post(t, requestBody(t, textEmail)) // 503
		b.sim.SetOutage(0)
		want := map[int]int64{200: 2, 400: 1, 429: 1, 503: 1}

		st := b.sim.Stats()
		if st.Requests != 5 || !maps.Equal(st.ByStatus, want) || st.Limited != 1 || st.CompletionTokens != completion ||
			st.Faults[FaultOutage] != 1 || st.PromptTokens <= 0 || st.OutageRemainingMS != 0 {
			t.Errorf("Stats() = %+v, want 5 requests %v, %d completion tokens", st, want, completion)
		}
		status, v := admin(t, b, "GET", "/admin/stats")
		if status != 200 || v["requests"] != 5.0 || v["limited"] != 1.0 || v["completion_tokens"] != float64(completion) {
			t.Errorf("GET /admin/stats: %d %v", status, v)
		}
		if bs, _ := v["by_status"].(map[string]any); bs["200"] != 2.0 || bs["503"] != 1.0 {
			t.Errorf("by_status %v", v["by_status"])
		}
		// GET /v1/models and /healthz are not chat calls.
		if _, err := b.client.ListModels(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := b.sim.Stats(); st.Requests != 5 {
			t.Errorf("requests %d after ListModels, want 5", st.Requests)
		}
	})

	t.Run("ClientGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 1, Latency: time.Minute})
		// The caller goes away only once its request is written, so that
		// the simulator has it however slowly this machine runs: a fixed
		// timeout could end the call before it was ever sent.
		body, err := json.Marshal(formatRequest(extractionMessages(textOrder)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
			time.AfterFunc(30*time.Millisecond, cancel)
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "POST",
			b.url+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("call answered %d against a 1m latency", resp.StatusCode)
		}
		deadline := time.Now().Add(10 * time.Second)
		for b.sim.Stats().ByStatus[StatusClientGone] != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v, want one %d", b.sim.Stats(), StatusClientGone)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
