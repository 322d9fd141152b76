package llmsim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// bucket is a token bucket holding at most limit units and refilled at
// limit units per minute, starting full (or empty: LimitsStartEmpty). It is not safe for concurrent use
// (limiter guards it).
type bucket struct {
	limit float64
	avail float64
	last  time.Time
}

func newBucket(perMinute int, empty bool) *bucket {
	if perMinute <= 0 {
		return nil
	}
	b := &bucket{limit: float64(perMinute), avail: float64(perMinute)}
	if empty {
		b.avail, b.last = 0, time.Now()
	}
	return b
}

// refill adds what the time since the last refill earned.
func (b *bucket) refill(now time.Time) {
	if !b.last.IsZero() && now.After(b.last) {
		b.avail = math.Min(b.limit, b.avail+b.limit*now.Sub(b.last).Minutes())
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
}

// wait returns how long until n units are available (after refill), 0 when
// they are now. n above the limit never fits; wait returns the time to a
// full bucket then.
func (b *bucket) wait(n float64) time.Duration {
	need := math.Min(n, b.limit) - b.avail
	if need <= 0 {
		return 0
	}
	return time.Duration(need / b.limit * float64(time.Minute))
}

// reset is how long until the bucket is full again.
func (b *bucket) reset() time.Duration {
	return time.Duration((b.limit - b.avail) / b.limit * float64(time.Minute))
}

// limitState is one dimension's x-ratelimit-* values.
type limitState struct {
	on        bool
	limit     int
	remaining int
	reset     time.Duration
}

func (b *bucket) state() limitState {
	if b == nil {
		return limitState{}
	}
	return limitState{on: true, limit: int(b.limit), remaining: int(math.Floor(b.avail)), reset: b.reset()}
}

// limiter enforces RequestsPerMinute and TokensPerMinute; a nil bucket is
// no limit. It is safe for concurrent use.
type limiter struct {
	mu       sync.Mutex
	requests *bucket
	tokens   *bucket
}

// limitDecision is the limiter's answer for one call.
type limitDecision struct {
	ok         bool
	tooLarge   bool          // the call's tokens exceed TokensPerMinute: waiting never helps
	over       string        // "requests" or "tokens": the dimension that refused
	retryAfter time.Duration // when refused: until both dimensions fit
	requests   limitState
	tokens     limitState
}

// take charges one request and tokens tokens when both fit, else nothing.
func (l *limiter) take(now time.Time, tokens int) limitDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := limitDecision{ok: true}
	if l.requests != nil {
		l.requests.refill(now)
		if w := l.requests.wait(1); w > 0 {
			d.ok, d.over, d.retryAfter = false, "requests", w
		}
	}
	if l.tokens != nil {
		l.tokens.refill(now)
		if float64(tokens) > l.tokens.limit {
			d.ok, d.tooLarge, d.over = false, true, "tokens"
		}
		if w := l.tokens.wait(float64(tokens)); w > 0 {
			d.ok = false
			if d.over == "" {
				d.over = "tokens"
			}
			d.retryAfter = max(d.retryAfter, w)
		}
	}
	if d.ok {
		if l.requests != nil {
			l.requests.avail--
		}
		if l.tokens != nil {
			l.tokens.avail -= float64(tokens)
		}
	}
	d.requests, d.tokens = l.requests.state(), l.tokens.state()
	return d
}

// peek returns the current state without charging anything.
func (l *limiter) peek(now time.Time) limitDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.requests != nil {
		l.requests.refill(now)
	}
	if l.tokens != nil {
		l.tokens.refill(now)
	}
	return limitDecision{ok: true, requests: l.requests.state(), tokens: l.tokens.state()}
}

// setHeaders writes the x-ratelimit-* headers of each enforced dimension.
func (d limitDecision) setHeaders(h http.Header) {
	for _, dim := range []struct {
		name string
		st   limitState
	}{{"requests", d.requests}, {"tokens", d.tokens}} {
		if !dim.st.on {
			continue
		}
		h.Set("X-Ratelimit-Limit-"+dim.name, strconv.Itoa(dim.st.limit))
		h.Set("X-Ratelimit-Remaining-"+dim.name, strconv.Itoa(max(dim.st.remaining, 0)))
		h.Set("X-Ratelimit-Reset-"+dim.name, formatReset(dim.st.reset))
	}
}

// formatReset formats d as OpenAI's x-ratelimit-reset-* headers do: Go
// duration text rounded up to the millisecond ("1s", "250ms", "6m0s").
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return (((d + time.Millisecond - 1) / time.Millisecond) * time.Millisecond).String()
}

// writeLimited answers a call the limiter refused: 429 with Retry-After and
// OpenAI's body, type "requests" or "tokens", code "rate_limit_exceeded".
func writeLimited(w http.ResponseWriter, d limitDecision, model string, tokens int) {
	setRetryAfter(w.Header(), d.retryAfter)
	var msg string
	switch {
	case d.tooLarge:
		msg = fmt.Sprintf("Request too large for %s on tokens per min (TPM): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
			model, d.tokens.limit, tokens)
	case d.over == "requests":
		msg = fmt.Sprintf("Rate limit reached for %s on requests per min (RPM): Limit %d, Used %d, Requested 1. Please try again in %s.",
			model, d.requests.limit, d.requests.limit-max(d.requests.remaining, 0), formatReset(d.retryAfter))
	default:
		msg = fmt.Sprintf("Rate limit reached for %s on tokens per min (TPM): Limit %d, Used %d, Requested %d. Please try again in %s.",
			model, d.tokens.limit, d.tokens.limit-max(d.tokens.remaining, 0), tokens, formatReset(d.retryAfter))
	}
	writeError(w, http.StatusTooManyRequests, d.over, "rate_limit_exceeded", "", msg)
}
