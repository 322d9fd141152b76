package webhook_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/extractq/extractq/ingestapi/webhook"
)

func TestReplayMemory(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	mac := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte{byte(i), byte(i >> 8)}) }
	m := webhook.NewReplayMemory(3)
	if !m.Reserve(mac(1), t0.Add(time.Minute), t0) {
		t.Fatal("a new signature was refused")
	}
	if m.Reserve(mac(1), t0.Add(time.Minute), t0.Add(30*time.Second)) {
		t.Error("a replay within the window was taken")
	}
	// Released (its request not taken): the retry is taken.
	m.Release(mac(1))
	if !m.Reserve(mac(1), t0.Add(time.Minute), t0.Add(30*time.Second)) {
		t.Error("a released signature was refused")
	}
	// Past its window it is forgotten (the timestamp check refuses it).
	if !m.Reserve(mac(2), t0.Add(3*time.Minute), t0.Add(2*time.Minute)) || m.Len() != 1 {
		t.Errorf("after the window: %d remembered, want 1", m.Len())
	}
	// Bounded: the oldest goes first.
	for i := 3; i < 10; i++ {
		if !m.Reserve(mac(i), t0.Add(time.Hour), t0.Add(2*time.Minute)) {
			t.Errorf("signature %d refused", i)
		}
		if m.Len() > 3 {
			t.Errorf("%d remembered, capacity 3", m.Len())
		}
	}
	if m.Reserve(mac(9), t0.Add(time.Hour), t0.Add(2*time.Minute)) {
		t.Error("the newest was forgotten")
	}
	if !m.Reserve(mac(2), t0.Add(time.Hour), t0.Add(2*time.Minute)) {
		t.Error("the oldest was kept past the capacity")
	}
}
