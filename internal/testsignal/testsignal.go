// Package testsignal lets a test wait for the thing it waits for, not for
// a fixed time, after river's rivershared/testsignal: a sleep long enough
// for a loaded machine wastes time everywhere else, and one short enough
// to be cheap fails on a loaded machine.
//
// Eventually polls a condition with a short tick until a deadline. A
// Signal is a channel that a hook in the code under test (a handler, a
// callback option, a subscription) sends on, which the test waits for.
package testsignal

import (
	"testing"
	"time"
)

// Tick is how often Eventually checks its condition.
const Tick = 10 * time.Millisecond

// Eventually calls cond every Tick until it returns true, and fails the
// test with what (the thing waited for) if it has not after timeout. cond
// runs on the test's goroutine, so it may call t.Fatal.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
			return
		}
		time.Sleep(Tick)
	}
}

// Signal carries values from a hook in the code under test to the test.
// Make one with New; the zero Signal drops every value.
type Signal[T any] struct {
	ch chan T
}

// New returns a Signal that holds up to size values not yet waited for;
// Send drops values beyond that.
func New[T any](size int) *Signal[T] {
	return &Signal[T]{ch: make(chan T, size)}
}

// Send hands v to the test without blocking: when the Signal is full (or
// nil, or the zero Signal), v is dropped, so a hook called more often
// than the test waits never stalls the code under test.
func (s *Signal[T]) Send(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the next value sent, and fails the test with what if none
// comes within timeout.
func (s *Signal[T]) Wait(t testing.TB, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-s.ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
		var zero T
		return zero
	}
}

// RequireEmpty fails the test if a value was sent that the test has not
// waited for.
func (s *Signal[T]) RequireEmpty(t testing.TB, what string) {
	t.Helper()
	select {
	case v := <-s.ch:
		t.Fatalf("unexpected %s: %v", what, v)
	default:
	}
}
