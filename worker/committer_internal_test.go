package worker

import (
	"testing"
	"time"
)

// TestPacerWait: the batch wait is the configured most, at most 5% of the
// median call latency, and none when steps come too rarely to share.
func TestPacerWait(t *testing.T) {
	p := newPacer(40 * time.Millisecond)
	if w := p.wait(); w != 0 {
		t.Errorf("no rate yet: wait %s, want 0", w)
	}
	steps := func(perSecond int, d time.Duration) {
		t0 := p.winStart
		if t0.IsZero() {
			t0 = time.Unix(1000, 0)
		}
		n := int(d.Seconds() * float64(perSecond))
		for i := 1; i <= n; i++ {
			p.arrive(t0.Add(time.Duration(i) * time.Second / time.Duration(perSecond)))
		}
	}
	steps(200, 2*time.Second)
	if w := p.wait(); w != 40*time.Millisecond {
		t.Errorf("200 steps/s, no latency known: wait %s, want the 40ms most", w)
	}
	for range 300 {
		p.observeLatency(800 * time.Millisecond)
	}
	if w := p.wait(); w != 40*time.Millisecond {
		t.Errorf("median call 800ms: wait %s, want 40ms", w)
	}
	// 1,000 steps/s: 16 steps come within 15ms.
	steps(1000, 2*time.Second)
	if w := p.wait(); w < 14*time.Millisecond || w > 16*time.Millisecond {
		t.Errorf("1000 steps/s: wait %s, want 15ms (16 steps)", w)
	}
	for range 300 {
		p.observeLatency(100 * time.Millisecond)
	}
	if w := p.wait(); w != 5*time.Millisecond {
		t.Errorf("median call 100ms: wait %s, want 5ms (5%%)", w)
	}
	// 20 steps/s: 0.1 expected within 5ms.
	steps(20, 3*time.Second)
	if w := p.wait(); w != 0 {
		t.Errorf("20 steps/s: wait %s, want 0", w)
	}
}
