package worker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
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

// TestCommitterOutcomesFirst: of the steps waiting, the outcomes go into a
// batch before the starts, whatever order they came in, and every step
// is written once the committer closes.
func TestCommitterOutcomesFirst(t *testing.T) {
	c := &committer{max: 4, outs: make(chan commitReq, 8), starts: make(chan commitReq, 8), pace: newPacer(0)}
	start := func(id int64) commitReq {
		return commitReq{start: &store.RunLeaseParams{MessageID: id}, at: time.Now()}
	}
	outcome := func(id int64) commitReq {
		return commitReq{outcome: store.RunOutcomeParams{MessageID: id}, at: time.Now()}
	}
	for id := int64(1); id <= 6; id++ {
		c.starts <- start(id)
	}
	c.outs <- outcome(101)
	c.outs <- outcome(102)
	close(c.outs)
	close(c.starts)
	writers := make(chan []commitReq)
	go c.collect(writers)
	// Batches go as soon as a writer is free, so where one ends varies;
	// the order of the steps does not.
	var got []string
	for b := range writers {
		if len(b) == 0 || len(b) > c.max {
			t.Errorf("a batch of %d steps, want 1 to %d", len(b), c.max)
		}
		for _, r := range b {
			if r.start != nil {
				got = append(got, fmt.Sprintf("s%d", r.start.MessageID))
			} else {
				got = append(got, fmt.Sprintf("o%d", r.outcome.MessageID))
			}
		}
	}
	want := []string{"o101", "o102", "s1", "s2", "s3", "s4", "s5", "s6"}
	if !slices.Equal(got, want) {
		t.Errorf("steps in the order %v, want %v", got, want)
	}
}
