package testsignal

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and returns.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestEventually(t *testing.T) {
	t.Parallel()

	t.Run("ReturnsOnceTrue", func(t *testing.T) {
		t.Parallel()
		calls := 0
		Eventually(t, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
		if calls != 3 {
			t.Errorf("%d calls, want 3", calls)
		}
	})

	t.Run("FailsAfterTimeout", func(t *testing.T) {
		t.Parallel()
		r := &recorder{TB: t}
		start := time.Now()
		Eventually(r, 50*time.Millisecond, "nothing", func() bool { return false })
		if !strings.Contains(r.failed, "waiting for nothing") {
			t.Errorf("failure %q, want one naming what was waited for", r.failed)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("failed after %v, before the 50ms timeout", d)
		}
	})
}

func TestSignal(t *testing.T) {
	t.Parallel()

	t.Run("WaitGetsWhatWasSent", func(t *testing.T) {
		t.Parallel()
		s := New[int](2)
		go s.Send(7)
		if v := s.Wait(t, time.Minute, "7"); v != 7 {
			t.Errorf("got %d, want 7", v)
		}
		s.RequireEmpty(t, "value")
	})

	t.Run("FullDrops", func(t *testing.T) {
		t.Parallel()
		s := New[int](1)
		s.Send(1)
		s.Send(2) // dropped, not blocking
		if v := s.Wait(t, time.Minute, "1"); v != 1 {
			t.Errorf("got %d, want 1", v)
		}
		s.RequireEmpty(t, "value")
	})

	t.Run("WaitTimesOut", func(t *testing.T) {
		t.Parallel()
		r := &recorder{TB: t}
		New[int](1).Wait(r, 20*time.Millisecond, "a value")
		if !strings.Contains(r.failed, "waiting for a value") {
			t.Errorf("failure %q", r.failed)
		}
	})

	t.Run("RequireEmptyFailsOnAValue", func(t *testing.T) {
		t.Parallel()
		r := &recorder{TB: t}
		s := New[string](1)
		s.Send("late")
		s.RequireEmpty(r, "delivery")
		if !strings.Contains(r.failed, "unexpected delivery: late") {
			t.Errorf("failure %q", r.failed)
		}
	})

	t.Run("NilAndZeroDrop", func(t *testing.T) {
		t.Parallel()
		var nilSignal *Signal[int]
		nilSignal.Send(1)
		var zero Signal[int]
		zero.Send(1)
	})
}
