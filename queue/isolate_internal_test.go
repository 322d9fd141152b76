package queue

import "testing"

// Two suspects that come back together, each delivery spent on both, take
// turns at running first: the bound in Isolation's comment rests on it.
func TestSuspectBefore(t *testing.T) {
	at := func(seq, n uint64) *Delivery { return &Delivery{StreamSeq: seq, NumDelivered: n} }
	for n := uint64(2); n <= 10; n++ {
		if suspectBefore(at(4, n), at(7, n)) == suspectBefore(at(4, n+1), at(7, n+1)) {
			t.Errorf("deliveries %d and %d: the same suspect runs first", n, n+1)
		}
		if suspectBefore(at(4, n), at(7, n)) == suspectBefore(at(7, n), at(4, n)) {
			t.Errorf("delivery %d: no strict order", n)
		}
	}
	if !suspectBefore(at(9, 2), at(1, 3)) || suspectBefore(at(1, 3), at(9, 2)) {
		t.Error("the suspect with fewer deliveries does not run first")
	}
}
