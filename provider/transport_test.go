package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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

// at returns when request i (from 0) came.
func (s *script) at(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.times[i]
}

func (s *script) gap(i int) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.times[i].Sub(s.times[i-1])
}

// waitFor polls cond every 10ms until it holds, failing the test when it
// still does not after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
		// The retry comes no sooner than the 150ms asked for; how much later
		// depends on the machine's load.
		if g := srv.gap(1); g < 145*time.Millisecond || g > 5*time.Second {
			t.Errorf("waited %v before the retry, want at least 150ms", g)
		}
		if srv.bodies[0] == "" || srv.bodies[1] != srv.bodies[0] {
			t.Errorf("retried body differs: %q vs %q", srv.bodies[1], srv.bodies[0])
		}
		if v := b.metric(t, "extractq_provider_retries_total", map[string]string{"class": "rate_limited"}); v != 1 {
			t.Errorf("retries metric = %v", v)
		}
		// The metric counts the wait the retry was scheduled with, not the
		// time it took: retry-after-ms (150ms) is preferred to the rounded-up
		// Retry-After (1s).
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "retry_after"}); math.Abs(v-0.15) > 1e-9 {
			t.Errorf("retry_after wait metric = %v, want 0.15 (retry-after-ms)", v)
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
		srv := newScript(t, jsonErr(429, "rate_limit_exceeded", "requests", "slow down").with("Retry-After-Ms", "30000"))
		cfg := testConfig()
		cfg.MaxElapsedTime = time.Minute
		b := setup(t, cfg, srv, "")
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.chat(cctx) }()
		// The retry is counted just before its 30s wait starts: cancel then.
		waitFor(t, 10*time.Second, "the retry's wait to start", func() bool {
			return b.metric(t, "extractq_provider_retries_total", map[string]string{"class": "rate_limited"}) == 1
		})
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the call had not returned 10s after the cancel, want promptly (its wait is 30s)")
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
		srv := newScript(t, jsonErr(503, "", "server_error", "overloaded").with("Retry-After-Ms", "30000"))
		cfg := testConfig()
		cfg.MaxElapsedTime = time.Minute // the deadline, not MaxElapsedTime, is what the wait would pass
		b := setup(t, cfg, srv, "")
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		pe := providerError(t, b.chat(cctx), ClassServerError)
		// A wait that started would have been counted as a retry and ended
		// only at the deadline.
		if el := time.Since(start); cctx.Err() != nil {
			t.Errorf("returned after %v, at the 10s deadline; a wait past the deadline should not start", el)
		}
		if v := b.metric(t, "extractq_provider_retries_total", map[string]string{"class": "server_error"}); v != 0 {
			t.Errorf("retries metric = %v, want 0: a wait past the deadline should not start", v)
		}
		if pe.RetryAfter != 30*time.Second || srv.requests() != 1 {
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
		// One every 500ms: a call waits unless the one before took that
		// long, which even a loaded machine does not take.
		cfg.RequestsPerMinute = 120
		const spacing = 500 * time.Millisecond
		b := setup(t, cfg, srv, "")
		var starts [3]time.Time
		for i := range starts {
			starts[i] = time.Now()
			if err := b.chat(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// A call is let through at least 500ms after the one before it was
		// let through, which was after that call started. (The gap the
		// server sees can be shorter when the earlier request took longer
		// to arrive.)
		for i := 1; i < 3; i++ {
			if d := srv.at(i).Sub(starts[i-1]); d < spacing-time.Millisecond {
				t.Errorf("request %d came %v after call %d started, want at least %v", i+1, d, i, spacing)
			}
			if g := srv.gap(i); g > 5*time.Second {
				t.Errorf("gap %d = %v, want about %v", i, g, spacing)
			}
		}
		// The next reservation is due 500ms after the last call was let
		// through, which was after it started.
		r := b.tr.lim.requests.Reserve()
		d := r.Delay()
		r.Cancel()
		if since := time.Since(starts[2]); d > spacing || d < spacing-since {
			t.Errorf("next reservation delay %v, want in [%v - %v since the last call started, %v]", d, spacing, since, spacing)
		}
		// Each wait is the 500ms spacing less the time the previous call
		// took, so the two waits add up to a little under 1s; how much
		// under depends on the machine's load.
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "requests_limit"}); v <= 0 || v > 2*spacing.Seconds() {
			t.Errorf("requests_limit wait metric = %v, want in (0, %v]", v, 2*spacing.Seconds())
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
		// Two calls need 2*cost; the bucket holds 2*cost-100 and refills
		// (2*cost-100)/60 a second: the second call waits about 1s, less the
		// time the first call took.
		const short = 100
		cfg.TokensPerMinute = 2*cost - short
		perSecond := float64(cfg.TokensPerMinute) / 60
		b := setup(t, cfg, srv, "")
		first := time.Now()
		if _, err := b.client.CreateChatCompletion(ctx, req); err != nil {
			t.Fatal(err)
		}
		// What the bucket held less the call's cost, plus what it refilled
		// since the call started.
		left := b.tr.lim.tokens.Tokens()
		if want, refill := float64(cfg.TokensPerMinute-cost), perSecond*time.Since(first).Seconds(); left < want-1 || left > want+refill+1 {
			t.Errorf("tokens left %v, want %v plus up to %.1f refilled", left, want, refill)
		}
		start := time.Now()
		if _, err := b.client.CreateChatCompletion(ctx, req); err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		// The second call is let through once the tokens missing have
		// refilled since the first call took its tokens, which was after
		// it started.
		if d, want := srv.at(1).Sub(first), time.Duration(short/perSecond*float64(time.Second)); d < want-time.Millisecond {
			t.Errorf("second request came %v after the first call started, want at least %v", d, want)
		}
		if el > 5*time.Second {
			t.Errorf("second call took %v, want about 1s", el)
		}
		// The wait is counted, and it is part of the second call's time.
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "tokens_limit"}); v <= 0 || v > el.Seconds() {
			t.Errorf("tokens_limit wait metric = %v, want in (0, %v]", v, el.Seconds())
		}
	})

	t.Run("RemainingZeroPausesUntilReset", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, ok().with("X-Ratelimit-Remaining-Requests", "0").with("X-Ratelimit-Reset-Requests", "1s").
			with("X-Ratelimit-Remaining-Tokens", "15000").with("X-Ratelimit-Reset-Tokens", "6m0s"), ok())
		b := setup(t, testConfig(), srv, "")
		for range 2 {
			if err := b.chat(ctx); err != nil {
				t.Fatal(err)
			}
		}
		g := srv.gap(1)
		if g < time.Second-time.Millisecond || g > 5*time.Second {
			t.Errorf("second call came %v after the first, want after the 1s reset", g)
		}
		// The wait is what is left of the 1s when the second call starts:
		// less than 1s by however long the end of the first call and the
		// start of the second took; and it is part of the gap.
		if v := b.metric(t, "extractq_provider_rate_limit_wait_seconds_total", map[string]string{"reason": "provider_headers"}); v <= 0 || v > 1 || v > g.Seconds() {
			t.Errorf("provider_headers wait metric = %v, want in (0, 1] and at most the gap %v", v, g)
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
		srv := newScript(t, ok().with("X-Ratelimit-Remaining-Requests", "0").with("X-Ratelimit-Reset-Requests", "60s"))
		b := setup(t, testConfig(), srv, "")
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		// The pause (60s) ends past the deadline (10s): the call fails at
		// once, long before its deadline.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		pe := providerError(t, b.chat(cctx), ClassRateLimited)
		if el := time.Since(start); cctx.Err() != nil || srv.requests() != 1 || !pe.local {
			t.Errorf("took %v (deadline 10s), %d requests, error %+v", el, srv.requests(), pe)
		}
		if c := b.tr.cb.Counts(); c.TotalFailures != 0 {
			t.Errorf("a client-side refusal counted as a breaker failure: %+v", c)
		}
	})
}

// whileOpen runs scenario, which opens a breaker with the given cooldown
// and checks what holds while it is open. It returns the time the breaker
// opened no earlier than (the start of the call that opened it) and the
// first check that failed, or "". A check that failed within the cooldown
// of that time fails the test. One that failed later cannot tell: a stall
// of the loaded machine outlasted the cooldown, and the breaker may
// rightly have turned half-open; the scenario then runs again, on a fresh
// transport, up to 5 times.
func whileOpen(t *testing.T, cooldown time.Duration, scenario func() (opened time.Time, problem string)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		opened, problem := scenario()
		if problem == "" {
			return
		}
		el := time.Since(opened)
		if el < cooldown || attempt == 5 {
			t.Fatalf("%s (%v after the breaker opened, cooldown %v; attempt %d)", problem, el, cooldown, attempt)
		}
		t.Logf("attempt %d: %s, but %v had passed since the breaker opened, past its %v cooldown: trying again", attempt, problem, el, cooldown)
	}
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	breakerConfig := func() config.Provider {
		cfg := testConfig()
		cfg.MaxRetries = 1
		cfg.BreakerFailures = 2
		// Long enough that the checks made while the breaker is open
		// usually finish within it on a loaded machine; whileOpen runs
		// them again when a stall outlasted it.
		cfg.BreakerCooldown = time.Second
		return cfg
	}

	t.Run("OpensThenProbeCloses", func(t *testing.T) {
		t.Parallel()
		var srv *script
		var b *bundle
		var opening time.Time // the start of the call that opens the breaker
		whileOpen(t, breakerConfig().BreakerCooldown, func() (time.Time, string) {
			srv = newScript(t, jsonErr(503, "", "server_error", "down"))
			b = setup(t, breakerConfig(), srv, "")
			for range 2 {
				opening = time.Now()
				providerError(t, b.chat(ctx), ClassServerError)
			}
			if st, ready := b.tr.State(), b.tr.Ready(); st != BreakerOpen || ready {
				return opening, fmt.Sprintf("state %s, ready %v; want open, not ready", st, ready)
			}
			if v := b.metric(t, "extractq_provider_breaker_state", nil); v != 2 {
				return opening, fmt.Sprintf("breaker_state metric = %v, want 2", v)
			}
			if bs := b.tr.BreakerStatus(); bs.State != BreakerOpen || bs.Cause != ClassServerError ||
				bs.ProbeAt.Before(opening.Add(time.Second)) || bs.ProbeAt.After(time.Now().Add(time.Second)) {
				return opening, fmt.Sprintf("BreakerStatus %+v, want open by server_error, probe about 1s after it opened", bs)
			}
			n := srv.requests()
			err := b.chat(ctx)
			var pe *Error
			if !errors.As(err, &pe) || Class(err) != ClassCircuitOpen || !pe.Class.Transient() || srv.requests() != n {
				return opening, fmt.Sprintf("a call on the open breaker: %v (class %q), %d requests before it, %d after; want a circuit_open error and no request",
					err, Class(err), n, srv.requests())
			}
			return opening, ""
		})

		srv.set(ok())
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		start := time.Now()
		if err := b.tr.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		// Not before the 1s cooldown has passed since the breaker opened,
		// and not long after.
		if d := time.Since(opening); d < time.Second {
			t.Errorf("WaitReady returned %v after the breaker opened, before the 1s cooldown", d)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("WaitReady took %v, want about the 1s cooldown", el)
		}
		if b.tr.State() != BreakerHalfOpen || !b.tr.Ready() {
			t.Fatalf("state %s after the cooldown, want half_open and ready", b.tr.State())
		}
		if bs := b.tr.BreakerStatus(); bs.State != BreakerHalfOpen || bs.Cause != ClassServerError || !bs.ProbeAt.IsZero() {
			t.Fatalf("BreakerStatus %+v after the cooldown, want half_open by server_error", bs)
		}
		if err := b.chat(ctx); err != nil {
			t.Fatal(err)
		}
		if b.tr.State() != BreakerClosed || !b.tr.Ready() {
			t.Fatalf("state %s after a good probe, want closed", b.tr.State())
		}
		if bs := b.tr.BreakerStatus(); bs != (BreakerStatus{State: BreakerClosed}) {
			t.Fatalf("BreakerStatus %+v after a good probe, want closed without a cause", bs)
		}
	})

	t.Run("FailedProbeReopens", func(t *testing.T) {
		t.Parallel()
		whileOpen(t, breakerConfig().BreakerCooldown, func() (time.Time, string) {
			srv := newScript(t, jsonErr(401, "invalid_api_key", "invalid_request_error", "bad key"))
			b := setup(t, breakerConfig(), srv, "")
			var opening time.Time
			for range 2 {
				opening = time.Now()
				providerError(t, b.chat(ctx), ClassCredentials)
			}
			if st := b.tr.State(); st != BreakerOpen || srv.requests() != 2 {
				return opening, fmt.Sprintf("state %s after two credentials failures, %d requests", st, srv.requests())
			}
			// Not a check of the open breaker: the cooldown is waited out.
			// (The guard above has already passed when this runs.)
			if err := b.tr.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			opening = time.Now()
			providerError(t, b.chat(ctx), ClassCredentials)
			if st := b.tr.State(); st != BreakerOpen {
				return opening, fmt.Sprintf("state %s after a failed probe, want open", st)
			}
			return opening, ""
		})
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
	if d := l.observeHeaders(h("X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "1s"), now, 0); d != 0 {
		t.Errorf("remaining 3 paused %v", d)
	}
	if d := l.observeHeaders(h("X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "6m0s",
		"X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1s"), now, 0); d != 6*time.Minute {
		t.Errorf("pause %v, want the longer reset", d)
	}
	// With the limit known, the wait is for one request's (or one call's
	// tokens') worth of the refill, not for a full bucket: an empty bucket
	// of 3000 a minute, full again in 60s, has a request back in 20ms.
	l = newLimits(0, 0)
	if d := l.observeHeaders(h("X-Ratelimit-Limit-Requests", "3000", "X-Ratelimit-Remaining-Requests", "0",
		"X-Ratelimit-Reset-Requests", "1m0s"), now, 0); d != 20*time.Millisecond {
		t.Errorf("requests: pause %v, want 20ms", d)
	}
	l = newLimits(0, 0)
	if d := l.observeHeaders(h("X-Ratelimit-Limit-Tokens", "600000", "X-Ratelimit-Remaining-Tokens", "0",
		"X-Ratelimit-Reset-Tokens", "1m0s"), now, 3000); d != 300*time.Millisecond {
		t.Errorf("tokens: pause %v, want 300ms (3000 of 600000 a minute)", d)
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
