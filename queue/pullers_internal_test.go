package queue

import "testing"

func TestPullerCount(t *testing.T) {
	for c, want := range map[int]int{1: 1, 3: 3, 8: 4, 256: 4, 512: 8, 2048: 32, 10000: 32} {
		if got := pullerCount(c); got != want {
			t.Errorf("pullerCount(%d) = %d, want %d", c, got, want)
		}
	}
}
