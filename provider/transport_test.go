package provider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
)

const okBody = `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,` +
	`"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

// reply is one scripted answer.
type reply struct {
	status int
	header map[string]string
	body   string
}

func ok() reply {
	return reply{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: okBody}
}

func jsonErr(status int, code, typ, msg string) reply {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "type": typ, "message": msg}})
	return reply{status: status, header: map[string]string{"Content-Type": "application/json"}, body: string(b)}
}

func (r reply) with(k, v string) reply {
	h := map[string]string{}
	for a, b := range r.header {
		h[a] = b
	}
	h[k] = v
	r.header = h
	return r
}

// script is an httptest server answering each request with the next
// scripted reply (the last one repeats), recording when each came and its
// body.
type script struct {
	mu      sync.Mutex
	replies []reply
	times   []time.Time
	bodies  []string
	srv     *httptest.Server
}

func newScript(t *testing.T, replies ...reply) *script {
	t.Helper()
	s := &script{replies: replies}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		i := len(s.times)
		s.times = append(s.times, time.Now())
		s.bodies = append(s.bodies, string(b))
		rep := s.replies[min(i, len(s.replies)-1)]
		s.mu.Unlock()
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// set replaces the script from the next request on.
func (s *script) set(replies ...reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(make([]reply, len(s.times)), replies...)
}

func (s *script) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times)
}

func (s *script) gap(i int) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.times[i].Sub(s.times[i-1])
}

// testConfig retries fast and never trips the breaker.
func testConfig() config.Provider {
	return config.Provider{MaxRetries: 3, InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond,
		Multiplier: 2, MaxElapsedTime: 5 * time.Second, BreakerFailures: 1000, BreakerCooldown: time.Minute}
}

type bundle struct {
	tr     *Transport
	reg    *prometheus.Registry
	client *openai.Client
	srv    *script
}

// setup builds a Transport on cfg and the real go-openai client on it,
// calling url (the script's server when url is empty).
func setup(t *testing.T, cfg config.Provider, srv *script, url string) *bundle {
	t.Helper()
	reg := prometheus.NewRegistry()
	tr := New(cfg, nil, reg, zaptest.NewLogger(t))
	if url == "" {
		url = srv.srv.URL
	}
	oc := openai.DefaultConfig("test-key")
	oc.BaseURL = url + "/v1"
	oc.HTTPClient = tr.Client()
	return &bundle{tr: tr, reg: reg, client: openai.NewClientWithConfig(oc), srv: srv}
}

func chatRequest(maxTokens int) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: "m", MaxCompletionTokens: maxTokens,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "where is my parcel?"}}}
}

func (b *bundle) chat(ctx context.Context) error {
	_, err := b.client.CreateChatCompletion(ctx, chatRequest(16))
	return err
}

// metric returns the value of the counter or gauge name with labels, or 0.
func (b *bundle) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// providerError asserts err carries a *Error of class want and returns it.
func providerError(t *testing.T, err error, want ErrorClass) *Error {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a *provider.Error", err, err)
	}
	if Class(err) != want || pe.Class != want {
		t.Fatalf("class = %q, want %q (err %v)", Class(err), want, err)
	}
	return pe
}

func TestRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RateLimitedWaitsRetryAfter", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(429, "rate_limit_exceeded", "requests", "Rate limit reached").
			with("Retry-After-Ms", "150").with("Retry-After", "1"), ok())
		b := setup(t, testConfig(), srv, "")
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		if n := srv.requests(); n != 2 {
			t.Fatalf("requests = %d, want 2", n)
		}
		// retry-after-ms is preferred to the rounded-up Retry-After.
		if g := srv.gap(1); g < 145*time.Millisecond || g > 900*time.Millisecond {
			t.Errorf("waited %v before the retry, want about 150ms", g)
		}
		if srv.bodies[0] == "" || srv.bodies[1] != srv.bodies[0] {
			t.Errorf("retried body differs: %q vs %q", srv.bodies[1], srv.bodies[0])
		}
		if v := b.metric(t, "extractq_provider_retries_total", map[string]string{"class": "rate_limited"}); v != 1 {
			t.Errorf("retries metric = %v", v)
		}
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "retry_after"}); v < 0.14 {
			t.Errorf("retry_after wait metric = %v", v)
		}
		if v := b.metric(t, "extractq_provider_calls_total", map[string]string{"result": "ok"}); v != 1 {
			t.Errorf("ok calls metric = %v", v)
		}
	})

	t.Run("ServerErrorThenSuccess", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(500, "", "server_error", "The server had an error"), ok())
		b := setup(t, testConfig(), srv, "")
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		if n := srv.requests(); n != 2 {
			t.Fatalf("requests = %d, want 2", n)
		}
	})

	t.Run("BadRequestNotRetried", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(400, "context_length_exceeded", "invalid_request_error",
			"This model's maximum context length is 8192 tokens."))
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassBadRequest)
		if n := srv.requests(); n != 1 {
			t.Fatalf("requests = %d, want 1", n)
		}
		if pe.StatusCode != 400 || pe.Code != "context_length_exceeded" || pe.Attempts != 1 || !pe.Class.MessageFault() {
			t.Errorf("error %+v", pe)
		}
	})

	t.Run("RetriesSpent", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(503, "", "server_error", "overloaded"))
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassServerError)
		if n := srv.requests(); n != 4 || pe.Attempts != 4 || pe.StatusCode != 503 {
			t.Fatalf("requests = %d, attempts %d, status %d; want 4 (1 + max_retries 3)", n, pe.Attempts, pe.StatusCode)
		}
		if v := b.metric(t, "extractq_provider_calls_total", map[string]string{"result": "error", "class": "server_error"}); v != 1 {
			t.Errorf("calls metric = %v", v)
		}
		if v := b.metric(t, "extractq_provider_retries_total", map[string]string{"class": "server_error"}); v != 3 {
			t.Errorf("retries metric = %v", v)
		}
	})

	t.Run("ConnectionRefusedRetried", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String()
		l.Close()
		b := setup(t, testConfig(), nil, url)
		pe := providerError(t, b.chat(ctx), ClassConnection)
		if pe.Attempts != 4 || pe.StatusCode != 0 || pe.Err == nil {
			t.Fatalf("error %+v, want 4 attempts", pe)
		}
	})

	t.Run("ProxyPageNotRetried", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, reply{status: 403, header: map[string]string{"Content-Type": "text/html"},
			body: "<html><body><h1>403 Forbidden</h1>secret-looking page</body></html>"})
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassProxyPage)
		if n := srv.requests(); n != 1 {
			t.Fatalf("requests = %d, want 1", n)
		}
		if !pe.Class.Alert() || pe.Class.MessageFault() || strings.Contains(pe.Error(), "secret") || !strings.Contains(pe.Message, "text/html") {
			t.Errorf("error %q", pe.Error())
		}
	})

	t.Run("ProxyPage502Retried", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, reply{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: "<html>Bad Gateway</html>"})
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassProxyPage)
		if pe.Attempts != 4 {
			t.Fatalf("attempts = %d, want 4", pe.Attempts)
		}
	})

	t.Run("Credentials", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(401, "invalid_api_key", "invalid_request_error", "Incorrect API key provided."))
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassCredentials)
		if n := srv.requests(); n != 1 || !pe.Class.Alert() {
			t.Fatalf("requests = %d, want 1", n)
		}
	})

	t.Run("QuotaExhaustedNotRetried", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota.").
			with("Retry-After", "1"))
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassQuotaExhausted)
		if n := srv.requests(); n != 1 || !pe.Class.Alert() {
			t.Fatalf("requests = %d, want 1", n)
		}
	})

	t.Run("EndpointNotFound", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(404, "model_not_found", "invalid_request_error", "The model `m` does not exist."))
		b := setup(t, testConfig(), srv, "")
		providerError(t, b.chat(ctx), ClassEndpoint)
		if n := srv.requests(); n != 1 {
			t.Fatalf("requests = %d, want 1", n)
		}
	})

	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{"<html>Welcome to the hotel wifi</html>", `{"object":"chat.completion","choices":[]}`, `{"choices":`} {
			srv := newScript(t, reply{status: 200, body: body})
			b := setup(t, testConfig(), srv, "")
			pe := providerError(t, b.chat(ctx), ClassMalformed)
			if n := srv.requests(); n != 1 || pe.StatusCode != 200 || !pe.Class.Transient() {
				t.Fatalf("%s: requests = %d, error %+v", body, n, pe)
			}
		}
	})

	t.Run("CancelDuringBackoffReturnsPromptly", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(429, "rate_limit_exceeded", "requests", "slow down").with("Retry-After-Ms", "5000"))
		cfg := testConfig()
		cfg.MaxElapsedTime = time.Minute
		b := setup(t, cfg, srv, "")
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := b.chat(cctx)
		if el := time.Since(start); el > time.Second {
			t.Errorf("returned after %v, want promptly after the cancel", el)
		}
		if !errors.Is(err, context.Canceled) || Class(err) != ClassNone {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if n := srv.requests(); n != 1 {
			t.Errorf("requests = %d, want 1", n)
		}
		if v := b.metric(t, "extractq_provider_calls_total", map[string]string{"result": "canceled"}); v != 1 {
			t.Errorf("canceled calls metric = %v", v)
		}
	})

	t.Run("DeadlineStopsRetriesWithTheProvidersAnswer", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(503, "", "server_error", "overloaded").with("Retry-After-Ms", "5000"))
		b := setup(t, testConfig(), srv, "")
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		pe := providerError(t, b.chat(cctx), ClassServerError)
		if el := time.Since(start); el > 400*time.Millisecond {
			t.Errorf("returned after %v; a wait past the deadline should not start", el)
		}
		if pe.RetryAfter != 5*time.Second || srv.requests() != 1 {
			t.Errorf("error %+v, requests %d", pe, srv.requests())
		}
	})
}

func TestLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RequestsPerMinuteSpacesCalls", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, ok())
		cfg := testConfig()
		cfg.RequestsPerMinute = 600 // one every 100ms
		b := setup(t, cfg, srv, "")
		for range 3 {
			if err := b.chat(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i < 3; i++ {
			if g := srv.gap(i); g < 90*time.Millisecond || g > 2*time.Second {
				t.Errorf("gap %d = %v, want about 100ms", i, g)
			}
		}
		// The next reservation is due about 100ms after the last.
		r := b.tr.lim.requests.Reserve()
		d := r.Delay()
		r.Cancel()
		if d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("next reservation delay %v, want up to 100ms", d)
		}
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "requests_limit"}); v < 0.18 {
			t.Errorf("requests_limit wait metric = %v", v)
		}
	})

	t.Run("TokensPerMinuteChargesTheEstimate", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, ok())
		req := chatRequest(3000)
		raw, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		cost := estimateCost(raw)
		if cost < 3000 || cost > 3100 {
			t.Fatalf("estimate %d, want max_completion_tokens plus a few", cost)
		}
		cfg := testConfig()
		// Two calls need 2*cost; the bucket holds 2*cost-20 and refills
		// (2*cost-20)/60 a second: the second call waits about 200ms.
		cfg.TokensPerMinute = 2*cost - 20
		b := setup(t, cfg, srv, "")
		if _, err := b.client.CreateChatCompletion(ctx, req); err != nil {
			t.Fatal(err)
		}
		if left := b.tr.lim.tokens.Tokens(); left < float64(cfg.TokensPerMinute-cost)-1 || left > float64(cfg.TokensPerMinute-cost)+50 {
			t.Errorf("tokens left %v, want about %d", left, cfg.TokensPerMinute-cost)
		}
		start := time.Now()
		if _, err := b.client.CreateChatCompletion(ctx, req); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 120*time.Millisecond || el > 2*time.Second {
			t.Errorf("second call took %v, want about 200ms", el)
		}
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "tokens_limit"}); v < 0.12 {
			t.Errorf("tokens_limit wait metric = %v", v)
		}
	})

	t.Run("RemainingZeroPausesUntilReset", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, ok().with("X-Ratelimit-Remaining-Requests", "0").with("X-Ratelimit-Reset-Requests", "200ms").
			with("X-Ratelimit-Remaining-Tokens", "15000").with("X-Ratelimit-Reset-Tokens", "6m0s"), ok())
		b := setup(t, testConfig(), srv, "")
		for range 2 {
			if err := b.chat(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if g := srv.gap(1); g < 180*time.Millisecond || g > 2*time.Second {
			t.Errorf("second call came %v after the first, want after the 200ms reset", g)
		}
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "provider_headers"}); v < 0.15 {
			t.Errorf("provider_headers wait metric = %v", v)
		}
	})

	t.Run("RateLimitedWithoutRetryAfterWaitsForReset", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(429, "rate_limit_exceeded", "tokens", "Rate limit reached for tokens").
			with("X-Ratelimit-Remaining-Tokens", "0").with("X-Ratelimit-Reset-Tokens", "150ms"), ok())
		b := setup(t, testConfig(), srv, "")
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		if g := srv.gap(1); g < 140*time.Millisecond {
			t.Errorf("retried %v after the 429, want after the 150ms reset", g)
		}
	})

	t.Run("WaitPastDeadlineFailsFast", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, ok().with("X-Ratelimit-Remaining-Requests", "0").with("X-Ratelimit-Reset-Requests", "5s"))
		b := setup(t, testConfig(), srv, "")
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		pe := providerError(t, b.chat(cctx), ClassRateLimited)
		if el := time.Since(start); el > 200*time.Millisecond || srv.requests() != 1 || !pe.local {
			t.Errorf("took %v, %d requests, error %+v", el, srv.requests(), pe)
		}
		if c := b.tr.cb.Counts(); c.TotalFailures != 0 {
			t.Errorf("a client-side refusal counted as a breaker failure: %+v", c)
		}
	})
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	breakerConfig := func() config.Provider {
		cfg := testConfig()
		cfg.MaxRetries = 1
		cfg.BreakerFailures = 2
		cfg.BreakerCooldown = 200 * time.Millisecond
		return cfg
	}

	t.Run("OpensThenProbeCloses", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(503, "", "server_error", "down"))
		b := setup(t, breakerConfig(), srv, "")
		for range 2 {
			providerError(t, b.chat(ctx), ClassServerError)
		}
		if b.tr.State() != BreakerOpen || b.tr.Ready() {
			t.Fatalf("state %s, ready %v; want open, not ready", b.tr.State(), b.tr.Ready())
		}
		if v := b.metric(t, "extractq_provider_breaker_state", nil); v != 2 {
			t.Errorf("breaker_state metric = %v, want 2", v)
		}
		n := srv.requests()
		pe := providerError(t, b.chat(ctx), ClassCircuitOpen)
		if srv.requests() != n || !pe.Class.Transient() {
			t.Fatalf("an open breaker sent a request")
		}

		srv.set(ok())
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		if err := b.tr.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("WaitReady took %v, want about the 200ms cooldown", el)
		}
		if b.tr.State() != BreakerHalfOpen || !b.tr.Ready() {
			t.Fatalf("state %s after the cooldown, want half_open and ready", b.tr.State())
		}
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		if b.tr.State() != BreakerClosed || !b.tr.Ready() {
			t.Fatalf("state %s after a good probe, want closed", b.tr.State())
		}
	})

	t.Run("FailedProbeReopens", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(401, "invalid_api_key", "invalid_request_error", "bad key"))
		b := setup(t, breakerConfig(), srv, "")
		for range 2 {
			providerError(t, b.chat(ctx), ClassCredentials)
		}
		if b.tr.State() != BreakerOpen || srv.requests() != 2 {
			t.Fatalf("state %s after two credentials failures, %d requests", b.tr.State(), srv.requests())
		}
		if err := b.tr.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		providerError(t, b.chat(ctx), ClassCredentials)
		if b.tr.State() != BreakerOpen {
			t.Fatalf("state %s after a failed probe, want open", b.tr.State())
		}
	})

	t.Run("BadRequestsDoNotOpen", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(400, "context_length_exceeded", "invalid_request_error", "too long"))
		b := setup(t, breakerConfig(), srv, "")
		for range 4 {
			providerError(t, b.chat(ctx), ClassBadRequest)
		}
		if b.tr.State() != BreakerClosed {
			t.Fatalf("state %s after bad requests, want closed", b.tr.State())
		}
	})

	t.Run("WaitReadyHonoursContext", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, jsonErr(500, "", "server_error", "down"))
		cfg := breakerConfig()
		cfg.BreakerCooldown = time.Minute
		b := setup(t, cfg, srv, "")
		for range 2 {
			b.chat(ctx)
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := b.tr.WaitReady(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitReady = %v, want the context's deadline", err)
		}
	})
}

func TestClass(t *testing.T) {
	t.Parallel()
	code := func(s string) any { return s }
	for _, tc := range []struct {
		name string
		err  error
		want ErrorClass
	}{
		{"Nil", nil, ClassNone},
		{"Canceled", context.Canceled, ClassNone},
		{"Deadline", context.DeadlineExceeded, ClassConnection},
		{"APIError429", &openai.APIError{HTTPStatusCode: 429, Code: code("rate_limit_exceeded")}, ClassRateLimited},
		{"APIErrorQuota", &openai.APIError{HTTPStatusCode: 429, Code: code("insufficient_quota")}, ClassQuotaExhausted},
		{"APIError401", &openai.APIError{HTTPStatusCode: 401}, ClassCredentials},
		{"APIError400", &openai.APIError{HTTPStatusCode: 400, Code: code("context_length_exceeded")}, ClassBadRequest},
		{"APIError422", &openai.APIError{HTTPStatusCode: 422}, ClassBadRequest},
		{"APIError503", &openai.APIError{HTTPStatusCode: 503}, ClassServerError},
		{"RequestErrorHTML403", &openai.RequestError{HTTPStatusCode: 403, Body: []byte("<html>no</html>")}, ClassProxyPage},
		{"RequestErrorHTML502", &openai.RequestError{HTTPStatusCode: 502, Body: []byte("<html>bad gateway</html>")}, ClassProxyPage},
		{"RequestErrorEmpty502", &openai.RequestError{HTTPStatusCode: 502}, ClassServerError},
		{"Decode", &json.SyntaxError{}, ClassMalformed},
		{"Net", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, ClassConnection},
		{"Wrapped", errors.Join(errors.New("post"), &Error{Class: ClassCredentials}), ClassCredentials},
	} {
		if got := Class(tc.err); got != tc.want {
			t.Errorf("%s: Class = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{h("Retry-After", "2"), 2 * time.Second},
		{h("Retry-After", "0.25"), 250 * time.Millisecond},
		{h("Retry-After", now.Add(3*time.Second).Format(http.TimeFormat)), 3 * time.Second},
		{h("Retry-After", "soon"), 0},
		{h("Retry-After", "-4"), 0},
		{h("Retry-After", "2", "Retry-After-Ms", "1500"), 1500 * time.Millisecond},
		{h(), 0},
	} {
		if got := retryAfter(tc.h, now); got != tc.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
	for in, want := range map[string]time.Duration{"1s": time.Second, "6m0s": 6 * time.Minute, "20ms": 20 * time.Millisecond,
		"1m30.5s": 90500 * time.Millisecond, "30": 30 * time.Second, now.Add(time.Minute).Format(time.RFC3339): time.Minute} {
		if got, ok := parseReset(in, now); !ok || got != want {
			t.Errorf("parseReset(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	if _, ok := parseReset("later", now); ok {
		t.Error("parseReset accepted nonsense")
	}
	l := newLimits(0, 0)
	if d := l.observeHeaders(h("X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "1s"), now); d != 0 {
		t.Errorf("remaining 3 paused %v", d)
	}
	if d := l.observeHeaders(h("X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "6m0s",
		"X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1s"), now); d != 6*time.Minute {
		t.Errorf("pause %v, want the longer reset", d)
	}
}

func TestEstimateCost(t *testing.T) {
	t.Parallel()
	if got := estimateCost([]byte(`{"messages":[{"role":"user","content":"12345678"}],"max_tokens":100}`)); got != 100+(38+3)/4 {
		t.Errorf("estimate %d", got)
	}
	if got := estimateCost([]byte("not json at all!")); got != 4 {
		t.Errorf("estimate of non-JSON %d", got)
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a := New(config.Provider{}, nil, reg, nil)
	b := New(config.Provider{}, nil, reg, nil)
	a.m.calls.WithLabelValues("ok", "none").Inc()
	b.m.calls.WithLabelValues("ok", "none").Inc()
	bb := &bundle{reg: reg}
	if v := bb.metric(t, "extractq_provider_calls_total", map[string]string{"result": "ok"}); v != 2 {
		t.Errorf("calls on the shared registry = %v, want 2", v)
	}
}
