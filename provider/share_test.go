package provider

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestSetShare: a share scales both limiters' rates (and the token
// bucket's minute of burst) from the configured limits, not from the
// last share, and the metric follows.
func TestSetShare(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RequestsPerMinute, cfg.TokensPerMinute = 3000, 600000
	b := setup(t, cfg, newScript(t, ok()), "")
	for _, share := range []float64{0.25, 0.5, 1, 1.0 / 3} {
		b.tr.SetShare(share)
		if got, want := b.tr.lim.requests.Limit(), rate.Limit(3000*share/60); math.Abs(float64(got-want)) > 1e-9 {
			t.Errorf("share %v: requests limit %v/s, want %v", share, got, want)
		}
		if got, want := b.tr.lim.tokens.Limit(), rate.Limit(600000*share/60); math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("share %v: tokens limit %v/s, want %v", share, got, want)
		}
		if got, want := b.tr.lim.tokens.Burst(), int(600000*share); got != want {
			t.Errorf("share %v: tokens burst %d, want %d", share, got, want)
		}
		if v := b.metric(t, "extractq_provider_limit_share", nil); math.Abs(v-share) > 1e-9 || b.tr.Share() != share {
			t.Errorf("share %v: metric %v, Share() %v", share, v, b.tr.Share())
		}
	}
	b.tr.SetShare(7)
	if b.tr.Share() != 1 {
		t.Errorf("SetShare(7): share %v, want clamped to 1", b.tr.Share())
	}
}

// TestPauseFrom: another replica's opening pauses this Transport until
// its end (open, not ready, calls refused unsent as circuit_open), and
// this one's own opening is told to OnOpen once, with its cause.
func TestPauseFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newScript(t, ok())
	b := setup(t, testConfig(), srv, "")
	until := time.Now().Add(400 * time.Millisecond)
	b.tr.PauseFrom(until, ClassQuotaExhausted)
	if st := b.tr.BreakerStatus(); st.State != BreakerOpen || st.Cause != ClassQuotaExhausted || !st.ProbeAt.Equal(until) || b.tr.Ready() {
		t.Errorf("paused: %+v, ready %v; want open by quota_exhausted until the pause's end", st, b.tr.Ready())
	}
	if err := b.chat(ctx); Class(err) != ClassCircuitOpen || srv.requests() != 0 {
		t.Errorf("a call while paused: %v, %d requests; want circuit_open, none sent", err, srv.requests())
	}
	if v := b.metric(t, "extractq_provider_breaker_state", nil); v != 2 {
		t.Errorf("breaker_state %v while paused, want 2", v)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.tr.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(until) {
		t.Errorf("ready before the pause's end")
	}
	if err := b.chat(ctx); err != nil || srv.requests() != 1 {
		t.Errorf("after the pause: %v, %d requests", err, srv.requests())
	}

	// This Transport's own opening reaches OnOpen once.
	down := newScript(t, jsonErr(401, "invalid_api_key", "invalid_request_error", "bad key"))
	cfg := testConfig()
	cfg.BreakerFailures = 2
	o := setup(t, cfg, down, "")
	var told atomic.Int32
	got := make(chan ErrorClass, 4)
	o.tr.OnOpen(func(cause ErrorClass, until time.Time) {
		told.Add(1)
		if time.Until(until) <= 0 {
			t.Errorf("OnOpen until %v is not ahead", until)
		}
		got <- cause
	})
	for range 4 {
		_ = o.chat(ctx)
	}
	select {
	case c := <-got:
		if c != ClassCredentials {
			t.Errorf("OnOpen cause %q, want credentials", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnOpen not called")
	}
	if o.tr.announceOpen() || told.Load() != 1 || len(got) != 0 {
		t.Errorf("one opening told again (%d calls)", told.Load())
	}
}
