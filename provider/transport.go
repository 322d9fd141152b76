package provider

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
)

// Body size limits: what is read of an error answer, of a chat
// completion checked for ClassMalformed, and what a ClassMalformed *Error
// keeps of the body.
const (
	maxErrorBody      = 1 << 20
	maxCompletionBody = 64 << 20
	maxMalformedBody  = 64 << 10
)

// readyPoll is how often WaitReady looks again while a half-open probe is
// in flight.
const readyPoll = 50 * time.Millisecond

// Transport is an http.RoundTripper for an OpenAI-compatible API that
// paces, retries, classifies and breaks, in that order for each call:
//
//  1. the circuit breaker refuses the call at once (ClassCircuitOpen) while
//     it is open, and lets one probe through when half-open;
//  2. before each attempt, the call waits for the provider's reset when its
//     x-ratelimit-remaining-* headers reached 0, then for the client-side
//     requests and tokens limiters;
//  3. timeouts, connection errors, 408, 429 and 5xx are retried with
//     exponential backoff and jitter, waiting at least what Retry-After
//     (or retry-after-ms) asks, up to MaxRetries retries and MaxElapsedTime
//     (and never past the request context's deadline);
//  4. every other failure, and the last retried one, comes back as a *Error
//     carrying its ErrorClass; a 2xx chat completion that is not one is
//     ClassMalformed.
//
// A Transport is safe for concurrent use; share one per process so that
// its limiters and breaker see every call.
type Transport struct {
	cfg  config.Provider
	base http.RoundTripper
	log  *zap.Logger
	lim  *limits
	cb   *gobreaker.CircuitBreaker[*http.Response]
	m    *metrics

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every breaker state change
	openUntil time.Time
	cause     ErrorClass // class of the last failure the breaker counted since it closed

	// Another replica's breaker opening, seen through PauseFrom, and the
	// hook that tells the others of this one's (OnOpen).
	remoteUntil time.Time
	remoteCause ErrorClass
	onOpen      func(cause ErrorClass, until time.Time)
	announced   time.Time // openUntil of the last opening told to onOpen

	fixed *FixedParts
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport sending through base (nil: http.DefaultTransport)
// with cfg's retries, limits and breaker; zero fields of cfg take the
// defaults of config.Default, but for MaxRetries: 0 is no retries. Its metrics are registered on reg (nil: not
// registered). log may be nil.
func New(cfg config.Provider, base http.RoundTripper, reg prometheus.Registerer, log *zap.Logger) *Transport {
	cfg = config.Config{Provider: cfg}.WithDefaults().Provider
	if base == nil {
		base = http.DefaultTransport
	}
	if log == nil {
		log = zap.NewNop()
	}
	t := &Transport{cfg: cfg, base: base, log: log.Named("provider"), lim: newLimits(cfg.RequestsPerMinute, cfg.TokensPerMinute),
		changed: make(chan struct{}), fixed: NewFixedParts()}
	t.cb = gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{
		Name:        "llm_provider",
		MaxRequests: 1,
		Timeout:     cfg.BreakerCooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(max(cfg.BreakerFailures, 1))
		},
		OnStateChange: t.onStateChange,
		IsSuccessful:  isSuccessful,
		IsExcluded:    isExcluded,
	})
	t.m = newMetrics(reg, func() float64 {
		switch t.State() {
		case BreakerHalfOpen:
			return 1
		case BreakerOpen:
			return 2
		}
		return 0
	}, t.log)
	return t
}

// isSuccessful is what the breaker counts as a success: a call the
// provider answered, a bad_request included.
func isSuccessful(err error) bool {
	return err == nil || Class(err) == ClassBadRequest
}

// isExcluded is what the breaker does not count at all: cancellations, a
// deadline that passed before any answer, and refusals made here without
// asking the provider.
func isExcluded(err error) bool {
	if err == nil {
		return false
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.local
	}
	return Class(err) == ClassNone || errors.Is(err, context.DeadlineExceeded)
}

// Client returns an *http.Client using t, without a timeout of its own:
// each request's context bounds it. Set it as go-openai's
// ClientConfig.HTTPClient.
func (t *Transport) Client() *http.Client { return &http.Client{Transport: t} }

// FixedParts returns the request parts t puts back in place of their
// placeholders (see FixedParts) before it sends a request.
func (t *Transport) FixedParts() *FixedParts { return t.fixed }

// RoundTrip sends req with the Transport's pacing, retries and breaker.
// It returns the response of a call that succeeded (any 1xx-3xx, or a 2xx
// that is a chat completion where one is expected), and otherwise a *Error
// (see ErrorClass), or the context's error when req's context was
// cancelled. Its request body is read once, its fixed-part placeholders
// replaced by their parts, shared and not copied (FixedParts; an unknown
// one is an error and nothing is sent), and replayed on each attempt.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	pieces, err := t.fixed.pieces(body)
	if err != nil {
		return nil, err
	}
	pb := newPieceBody(pieces)
	ctx := req.Context()
	cost := 0
	if t.lim.tokens != nil {
		cost = pb.cost(body)
	}
	if until, cause := t.remotePause(time.Now()); !until.IsZero() {
		err := &Error{Class: ClassCircuitOpen, Message: fmt.Sprintf("another replica's circuit breaker opened after %s failures: paused until %s",
			cause, until.Format(time.RFC3339)), local: true}
		t.observeCall(err)
		return nil, err
	}
	resp, err := t.cb.Execute(func() (*http.Response, error) { return t.retry(ctx, req, body, pb, cost) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		err = &Error{Class: ClassCircuitOpen, Err: err, local: true}
	}
	if !isSuccessful(err) && !isExcluded(err) {
		t.mu.Lock()
		t.cause = Class(err)
		t.mu.Unlock()
		t.announceOpen()
	}
	t.observeCall(err)
	return resp, err
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	if sb, ok := req.Body.(*sentBody); ok && sb.off == 0 {
		return sb.b, nil // Chat's own bytes, not shared with anyone
	}
	var b []byte
	var err error
	if n := req.ContentLength; n > 0 && n <= maxCompletionBody {
		// The size is known (go-openai's bytes): read it into a slice of
		// that size, not one grown by doubling.
		b = make([]byte, n)
		_, err = io.ReadFull(req.Body, b)
	} else {
		b, err = io.ReadAll(req.Body)
	}
	if err != nil {
		return nil, fmt.Errorf("provider: reading the request body: %w", err)
	}
	return b, nil
}

// withBody returns a copy of req carrying body, replayable via GetBody:
// a shallow copy, as http.Request.WithContext makes (the base
// RoundTripper does not change a request, so its header is shared).
func withBody(req *http.Request, body pieceBody) *http.Request {
	r := new(http.Request)
	*r = *req
	if body.n == 0 {
		return r
	}
	r.Body = body.reader()
	r.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	r.ContentLength = int64(body.n)
	return r
}

// hintedBackOff is exponential backoff with jitter that waits at least
// the hint the last failure left (Retry-After, or the provider's reset).
type hintedBackOff struct {
	exp  *backoff.ExponentialBackOff
	hint *time.Duration
}

func (b *hintedBackOff) Reset() { b.exp.Reset() }

func (b *hintedBackOff) NextBackOff() time.Duration {
	d := b.exp.NextBackOff()
	if *b.hint > d {
		d = *b.hint
	}
	*b.hint = 0
	return d
}

// retry runs one call: attempts with backoff until success, a failure not
// worth retrying, MaxRetries, MaxElapsedTime or ctx's deadline.
func (t *Transport) retry(ctx context.Context, req *http.Request, raw []byte, body pieceBody, cost int) (*http.Response, error) {
	maxElapsed := t.cfg.MaxElapsedTime
	if dl, ok := ctx.Deadline(); ok {
		// At least 1ns: backoff reads 0 as no limit.
		maxElapsed = max(min(maxElapsed, time.Until(dl)), time.Nanosecond)
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	var (
		hint     time.Duration
		last     *Error
		attempts int
	)
	// stopped returns what ends the call when a wait or an attempt could
	// not finish: the provider's last answer if there was one and the
	// deadline (not a cancellation) ended it.
	stopped := func(err error) error {
		var pe *Error
		if last != nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pe) && pe.local)) {
			return last
		}
		return err
	}
	op := func() (*http.Response, error) {
		attempts++
		if err := t.lim.wait(ctx, cost, t.observeWait); err != nil {
			return nil, backoff.Permanent(stopped(err))
		}
		resp, err := t.base.RoundTrip(withBody(req, body))
		if err != nil {
			if ctx.Err() != nil {
				return nil, backoff.Permanent(stopped(context.Cause(ctx)))
			}
			last, hint = &Error{Class: ClassConnection, Err: err}, 0
			if permanentNetError(err) {
				return nil, backoff.Permanent(last)
			}
			return nil, last
		}
		if cost == 0 && strings.TrimSpace(resp.Header.Get("X-Ratelimit-Remaining-Tokens")) == "0" {
			cost = body.cost(raw) // only the tokens limiter needs it otherwise
		}
		if d := t.lim.observeHeaders(resp.Header, time.Now(), cost); d > 0 {
			t.log.Debug("provider rate limit reached; pausing calls until its reset", zap.Duration("pause", d))
		}
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			resp, last = t.checkSuccess(req, resp)
			if last == nil {
				return resp, nil
			}
			if last.Class == ClassMalformed {
				return nil, backoff.Permanent(last)
			}
			hint = 0
			return nil, last
		case resp.StatusCode < 400:
			return resp, nil
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		last = responseError(resp.StatusCode, resp.Header, b)
		if !last.retried() {
			return nil, backoff.Permanent(last)
		}
		hint = max(last.RetryAfter, t.lim.pause(time.Now()))
		return nil, last
	}
	exp := &backoff.ExponentialBackOff{InitialInterval: t.cfg.InitialInterval, RandomizationFactor: backoff.DefaultRandomizationFactor,
		Multiplier: t.cfg.Multiplier, MaxInterval: t.cfg.MaxInterval}
	resp, err := backoff.Retry(ctx, op,
		backoff.WithBackOff(&hintedBackOff{exp: exp, hint: &hint}),
		backoff.WithMaxTries(uint(max(t.cfg.MaxRetries, 0))+1),
		backoff.WithMaxElapsedTime(maxElapsed),
		backoff.WithNotify(func(err error, wait time.Duration) {
			c := Class(err)
			t.m.retries.WithLabelValues(string(c)).Inc()
			if c == ClassRateLimited {
				t.observeWait(waitRetryAfter, wait)
			}
			t.log.Debug("retrying provider request", zap.Int("attempt", attempts), zap.String("class", string(c)),
				zap.Int("status", statusOf(err)), zap.Duration("wait", wait))
		}))
	if err != nil {
		err = stopped(err)
		var pe *Error
		if errors.As(err, &pe) {
			pe.Attempts = attempts
		}
		return nil, err
	}
	return resp, nil
}

// checkSuccess checks that a 2xx answer to a chat completion request is a
// chat completion that go-openai can decode, and gives the response back
// with its body replayable (under Chat, the decoded value kept for
// the caller and an empty object as the body). Tool-call arguments sent as a JSON object
// rather than a string are rewritten as the string first (see
// rewriteToolArguments), once, here where the bytes arrive. It returns a
// ClassMalformed *Error carrying the body when it is not a chat completion,
// and a ClassConnection one when its body could not be read.
func (t *Transport) checkSuccess(req *http.Request, resp *http.Response) (*http.Response, *Error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") ||
		strings.Contains(resp.Header.Get("Content-Type"), "event-stream") {
		return resp, nil
	}
	b, err := readReply(resp)
	resp.Body.Close()
	if err != nil {
		return nil, &Error{Class: ClassConnection, StatusCode: resp.StatusCode, Message: "reading the reply failed", Err: err}
	}
	c, err := checkCompletion(b)
	if err != nil {
		if fixed, n := rewriteToolArguments(b); n > 0 {
			if fc, ferr := checkCompletion(fixed); ferr == nil {
				t.m.toolArgs.Inc()
				t.log.Debug("tool-call arguments came as JSON values, not strings; rewritten as strings",
					zap.Int("tool_calls", n), zap.Int("bytes", len(b)))
				b, c, err = fixed, fc, nil
			}
		}
	}
	if err != nil {
		return nil, &Error{Class: ClassMalformed, StatusCode: resp.StatusCode,
			Message: fmt.Sprintf("reply is not a chat completion (%s, %d bytes)", contentType(resp.Header), len(b)), Err: err,
			Body: b[:min(len(b), maxMalformedBody)], BodySize: len(b)}
	}
	if d := keepDecoded(req.Context()); d != nil {
		// A Chat call: it takes c, go-openai's decoding of b, and
		// go-openai decodes an empty object (see Chat).
		d.resp, d.ok = c, true
		b = emptyObject
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	return resp, nil
}

// readReply reads a chat completion's body, up to maxCompletionBody:
// into a slice of its Content-Length when the reply gives one, not one
// grown by doubling.
func readReply(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n <= 0 || n > maxCompletionBody {
		return io.ReadAll(io.LimitReader(resp.Body, maxCompletionBody))
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// emptyObject is the body go-openai decodes under Chat.
var emptyObject = []byte("{}")

// permanentNetError reports network errors a retry will not mend: a
// certificate that does not verify.
func permanentNetError(err error) bool {
	var cve *tls.CertificateVerificationError
	return errors.As(err, &cve)
}

func (t *Transport) observeWait(reason string, d time.Duration) {
	t.m.waits.WithLabelValues(reason).Add(d.Seconds())
}

func (t *Transport) observeCall(err error) {
	c := Class(err)
	switch {
	case err == nil:
		t.m.callsOK.Inc()
	case c == ClassNone:
		t.m.calls.WithLabelValues("canceled", "none").Inc()
	default:
		t.m.calls.WithLabelValues("error", string(c)).Inc()
	}
	if c.Alert() {
		t.log.Warn("provider call needs an operator; not the message's fault", zap.String("class", string(c)),
			zap.Int("status", statusOf(err)))
	}
}

// statusOf returns the HTTP status of a *Error in err's chain, or 0.
func statusOf(err error) int {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.StatusCode
	}
	return 0
}

// BreakerState is the circuit breaker's state.
type BreakerState string

// Breaker states.
const (
	// BreakerClosed: calls go through.
	BreakerClosed BreakerState = "closed"
	// BreakerHalfOpen: the cooldown has passed; one probe call goes
	// through, whose success closes the breaker and whose failure opens it
	// again. Other calls are refused while the probe is in flight.
	BreakerHalfOpen BreakerState = "half_open"
	// BreakerOpen: BreakerFailures consecutive calls failed; every call is
	// refused with ClassCircuitOpen until BreakerCooldown has passed.
	BreakerOpen BreakerState = "open"
)

// State returns the circuit breaker's state. A breaker whose cooldown has
// passed turns half-open here.
//
// While another replica's pause holds (PauseFrom), it is BreakerOpen.
func (t *Transport) State() BreakerState {
	switch t.cb.State() {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	}
	if until, _ := t.remotePause(time.Now()); !until.IsZero() {
		return BreakerOpen
	}
	return BreakerClosed
}

// BreakerStatus is the circuit breaker's state and why it is in it.
type BreakerStatus struct {
	State BreakerState
	// Cause is the class of the last failed call the breaker counted since
	// it last closed: while it is open or half-open, what opened it. ""
	// when none.
	Cause ErrorClass
	// ProbeAt is when an open breaker lets its next probe through; zero
	// unless open.
	ProbeAt time.Time
}

// BreakerStatus returns the circuit breaker's state (as State does) and
// what opened it.
func (t *Transport) BreakerStatus() BreakerStatus {
	st := BreakerStatus{State: t.State()}
	remote := t.cb.State() == gobreaker.StateClosed && st.State == BreakerOpen
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case remote:
		st.Cause, st.ProbeAt = t.remoteCause, t.remoteUntil
	case st.State != BreakerClosed:
		st.Cause = t.cause
		if st.State == BreakerOpen {
			st.ProbeAt = t.openUntil
		}
	}
	return st
}

// Ready reports whether a call now would be let through: the breaker is
// closed, or half-open with no probe in flight. A worker should fetch new
// messages only while Ready is true (and fetch one, the probe, when
// half-open); a call made while it is false fails at once with
// ClassCircuitOpen.
//
// What counts as a failure: a call whose retries were spent (connection,
// rate_limited, server_error, or proxy_page after 5xx retries), and every
// quota_exhausted, credentials, proxy_page, endpoint and malformed call. A
// bad_request is a success (the provider answered); a cancelled call, or
// one refused by the client-side limiter, does not count.
func (t *Transport) Ready() bool {
	switch t.State() {
	case BreakerClosed:
		return true
	case BreakerHalfOpen:
		c := t.cb.Counts()
		return c.Requests <= c.TotalExclusions
	}
	return false
}

// WaitReady blocks until Ready is true, and returns nil then, or
// context.Cause(ctx) when ctx ends first. While the breaker is open it
// wakes when the cooldown ends; while a half-open probe is in flight, when
// the probe's result changes the state.
func (t *Transport) WaitReady(ctx context.Context) error {
	for {
		t.mu.Lock()
		ch, until := t.changed, t.openUntil
		if t.remoteUntil.After(until) {
			until = t.remoteUntil
		}
		t.mu.Unlock()
		if t.Ready() {
			return nil
		}
		d := time.Until(until)
		if d <= 0 {
			d = readyPoll
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		case <-ch:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// onStateChange runs under the breaker's lock: it must not call the
// breaker.
func (t *Transport) onStateChange(_ string, from, to gobreaker.State) {
	t.mu.Lock()
	switch to {
	case gobreaker.StateOpen:
		t.openUntil = time.Now().Add(t.cfg.BreakerCooldown)
	case gobreaker.StateClosed:
		t.cause = ""
	}
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
	fields := []zap.Field{zap.String("from", from.String()), zap.String("to", to.String())}
	if to == gobreaker.StateOpen {
		t.mu.Lock()
		cause := t.cause
		t.mu.Unlock()
		t.log.Warn("provider circuit breaker opened; calls are refused until the cooldown ends",
			append(fields, zap.Duration("cooldown", t.cfg.BreakerCooldown), zap.Int("failures", t.cfg.BreakerFailures),
				zap.String("class", string(cause)))...)
		return
	}
	t.log.Info("provider circuit breaker changed state", fields...)
}
