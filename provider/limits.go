package provider

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxPause caps a wait the provider's headers ask for, against nonsense
// values.
const maxPause = time.Hour

// limits is the client-side pacing: a request limiter, a token limiter,
// and a pause until the provider's reset when its x-ratelimit-remaining-*
// headers reached 0.
type limits struct {
	requests *rate.Limiter // nil: no request limit
	tokens   *rate.Limiter // nil: no token limit
	rpm, tpm int           // the configured limits, which share scales

	mu         sync.Mutex
	pauseUntil time.Time
	share      float64 // of rpm and tpm this process uses (SetShare); 1 alone
}

// newLimits builds the limiters. Requests are spaced evenly (a burst of
// one): at 600 a minute, one every 100ms. The token bucket holds a minute's
// worth, so that any single request fits.
func newLimits(rpm, tpm int) *limits {
	l := &limits{rpm: rpm, tpm: tpm, share: 1}
	if rpm > 0 {
		l.requests = rate.NewLimiter(rate.Limit(float64(rpm)/60), 1)
	}
	if tpm > 0 {
		l.tokens = rate.NewLimiter(rate.Limit(float64(tpm)/60), tpm)
	}
	return l
}

// Wait reasons, as the rate_limit_wait_seconds metric labels them.
const (
	waitRequests   = "requests_limit"
	waitTokens     = "tokens_limit"
	waitHeaders    = "provider_headers"
	waitRetryAfter = "retry_after"
)

// wait blocks until the call may be sent: until the headers' pause ends,
// then until both limiters grant it (cost tokens). It reports each wait
// to observe. It returns ctx's error when ctx ends, and a local
// ClassRateLimited *Error when a wait would run past ctx's deadline (then
// nothing is taken from the limiters).
func (l *limits) wait(ctx context.Context, cost int, observe func(reason string, d time.Duration)) error {
	if d := l.pause(time.Now()); d > 0 {
		if err := sleep(ctx, d, "the provider's rate-limit reset"); err != nil {
			return err
		}
		observe(waitHeaders, d)
	}
	if l.requests != nil {
		if err := reserve(ctx, l.requests, 1, "requests_per_minute", waitRequests, observe); err != nil {
			return err
		}
	}
	if l.tokens != nil {
		n := min(max(cost, 1), l.tokens.Burst())
		if err := reserve(ctx, l.tokens, n, "tokens_per_minute", waitTokens, observe); err != nil {
			return err
		}
	}
	return nil
}

func reserve(ctx context.Context, lim *rate.Limiter, n int, what, reason string, observe func(string, time.Duration)) error {
	now := time.Now()
	r := lim.ReserveN(now, n)
	if !r.OK() {
		return &Error{Class: ClassRateLimited, Message: "client-side " + what + " cannot grant this call", local: true}
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return nil
	}
	if err := sleep(ctx, d, "client-side "+what); err != nil {
		r.CancelAt(time.Now())
		return err
	}
	observe(reason, d)
	return nil
}

// sleep waits d, or returns ctx's error when ctx ends first, or a local
// rate_limited *Error at once when d would run past ctx's deadline.
func sleep(ctx context.Context, d time.Duration, what string) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return &Error{Class: ClassRateLimited, Message: "waiting " + d.Round(time.Millisecond).String() + " for " + what +
			" would pass the call's deadline", local: true}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// pause returns how long from now calls must still wait for the provider's
// reset.
func (l *limits) pause(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pauseUntil.Sub(now)
}

// observeHeaders reads x-ratelimit-remaining-requests/-tokens and their
// resets: when a remaining count is 0, calls wait until enough of the
// limit is back for one more call. OpenAI's limits refill continuously
// ("rate limits can be applied over shorter periods - for example, 1
// request per second for a 60 RPM limit", help.openai.com article
// 5955604), and x-ratelimit-reset-* is the time until the limit is back
// to its initial state, full (platform.openai.com/docs/guides/rate-limits,
// "Rate limits in headers"). So with x-ratelimit-limit-* known, one
// request comes back after reset ÷ (limit − remaining), and cost tokens
// after reset × cost ÷ (limit − remaining); without it, calls wait the
// whole reset. cost is this call's token estimate, standing for the
// next one's. It returns the new pause, or 0.
func (l *limits) observeHeaders(h http.Header, now time.Time, cost int) time.Duration {
	var until time.Time
	for _, dim := range rateLimitHeaders {
		rem := h.Get(dim.remaining)
		if rem == "" {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(rem), 64)
		if err != nil || n > 0 {
			continue
		}
		d, ok := parseReset(h.Get(dim.reset), now)
		if !ok {
			continue
		}
		if limit, err := strconv.ParseFloat(strings.TrimSpace(h.Get(dim.limit)), 64); err == nil && limit-n >= 1 && !math.IsInf(limit, 0) {
			need := 1.0
			if dim.tokens {
				need = float64(max(cost, 1))
			}
			d = time.Duration(float64(d) * min(need/(limit-n), 1))
		}
		if t := now.Add(min(d, maxPause)); t.After(until) {
			until = t
		}
	}
	if until.IsZero() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.pauseUntil) {
		l.pauseUntil = until
	}
	return until.Sub(now)
}

// rateLimitHeaders are the x-ratelimit-* headers of each dimension,
// requests and tokens, in their canonical form (looked up without
// building or canonicalizing a key per reply).
var rateLimitHeaders = [...]struct {
	remaining, reset, limit string
	tokens                  bool
}{
	{"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Limit-Requests", false},
	{"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", "X-Ratelimit-Limit-Tokens", true},
}

// parseReset reads an x-ratelimit-reset-* value: a Go duration as OpenAI
// sends it ("1s", "6m0s", "20ms", "1m30.5s"), a number of seconds, or an
// RFC 3339 or HTTP date.
func parseReset(s string, now time.Time) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(s); err == nil {
		return max(d, 0), true
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && !math.IsInf(f, 0) {
		return time.Duration(f * float64(time.Second)), true
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return max(t.Sub(now), 0), true
	}
	if t, err := http.ParseTime(s); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// retryAfter reads retry-after-ms (milliseconds, as OpenAI and Azure send
// it) or Retry-After (seconds, possibly fractional, or an HTTP date). It
// returns 0 when neither is there or both are unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if ms := strings.TrimSpace(h.Get("Retry-After-Ms")); ms != "" {
		if f, err := strconv.ParseFloat(ms, 64); err == nil && f >= 0 && !math.IsInf(f, 0) {
			return min(time.Duration(f*float64(time.Millisecond)), maxPause)
		}
	}
	s := strings.TrimSpace(h.Get("Retry-After"))
	if s == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0
		}
		return min(time.Duration(f*float64(time.Second)), maxPause)
	}
	if t, err := http.ParseTime(s); err == nil {
		return min(max(t.Sub(now), 0), maxPause)
	}
	return 0
}

// estimateCost is the token cost of a chat request body for the token
// limiter: a quarter of the bytes of its messages, tools and
// response_format (the prompt), plus its completion cap
// (max_completion_tokens, else max_tokens). A body that is not JSON costs
// a quarter of its bytes.
func estimateCost(body []byte) int {
	var req struct {
		Messages            json.RawMessage `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		ResponseFormat      json.RawMessage `json:"response_format"`
		MaxCompletionTokens int             `json:"max_completion_tokens"`
		MaxTokens           int             `json:"max_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return (len(body) + 3) / 4
	}
	prompt := len(req.Messages) + len(req.Tools) + len(req.ResponseFormat)
	return (prompt+3)/4 + max(req.MaxCompletionTokens, req.MaxTokens)
}
