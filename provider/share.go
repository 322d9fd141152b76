package provider

import (
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// Replicas of a worker share one provider limit. A coordinator outside
// this package (queue.LimitShare, over a NATS KV bucket) counts the live
// replicas and gives each its share through SetShare, and carries one
// replica's breaker opening to the others through OnOpen and PauseFrom.

// SetShare sets the part of the configured requests_per_minute and
// tokens_per_minute this process may use, in (0, 1]: 1/n with n live
// replicas. Values outside (0, 1] are clamped to it. It takes effect at
// once, for calls already waiting too.
func (t *Transport) SetShare(share float64) {
	share = min(max(share, 1e-6), 1)
	t.lim.setShare(share)
	t.m.share.Set(share)
}

// Share returns the part of the configured limits this process uses (1
// until SetShare).
func (t *Transport) Share() float64 {
	t.lim.mu.Lock()
	defer t.lim.mu.Unlock()
	return t.lim.share
}

// OnOpen registers f, called (in its own goroutine) each time this
// process's breaker opens, with the failure class that opened it and the
// end of its cooldown: for telling the other replicas (PauseFrom). Set
// it before the first call.
func (t *Transport) OnOpen(f func(cause ErrorClass, until time.Time)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onOpen = f
}

// PauseFrom pauses this process's calls until until, because another
// replica's breaker opened for cause: State reports BreakerOpen, Ready
// is false and calls are refused with ClassCircuitOpen (not sent) until
// then, as if this breaker had opened. A pause already longer is kept.
// After it the breaker is as it was: the replica that opened its own
// probes the provider.
func (t *Transport) PauseFrom(until time.Time, cause ErrorClass) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !until.After(t.remoteUntil) || !until.After(time.Now()) {
		return
	}
	t.remoteUntil, t.remoteCause = until, cause
	close(t.changed)
	t.changed = make(chan struct{})
	t.log.Warn("provider paused by another replica's circuit breaker",
		zap.Time("until", until), zap.String("class", string(cause)))
}

// remotePause returns the end of another replica's pause and its cause,
// or zero when none holds now.
func (t *Transport) remotePause(now time.Time) (time.Time, ErrorClass) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.remoteUntil) {
		return t.remoteUntil, t.remoteCause
	}
	return time.Time{}, ""
}

// announceOpen calls the OnOpen hook once per opening of the breaker,
// and reports whether it did now.
func (t *Transport) announceOpen() bool {
	if t.cb.State() != gobreaker.StateOpen {
		return false
	}
	t.mu.Lock()
	f, until, cause := t.onOpen, t.openUntil, t.cause
	if f == nil || !until.After(t.announced) {
		t.mu.Unlock()
		return false
	}
	t.announced = until
	t.mu.Unlock()
	go f(cause, until)
	return true
}

// setShare scales both limiters to share of their configured rates. The
// token bucket keeps a minute's worth of its share, so that any single
// request of the share still fits.
func (l *limits) setShare(share float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.share = share
	now := time.Now()
	if l.requests != nil {
		l.requests.SetLimitAt(now, rate.Limit(float64(l.rpm)*share/60))
	}
	if l.tokens != nil {
		l.tokens.SetLimitAt(now, rate.Limit(float64(l.tpm)*share/60))
		l.tokens.SetBurstAt(now, max(int(float64(l.tpm)*share), 1))
	}
}
