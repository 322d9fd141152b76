package webhook

import (
	"crypto/sha256"
	"sync"
	"time"
)

// DefaultReplayMemory is ReplayMemory's capacity when NewReplayMemory is
// given 0: signatures remembered at once. Each takes some 100 bytes, so
// 100,000 take some 10 MB.
const DefaultReplayMemory = 100_000

// ReplayMemory remembers the signatures (their MACs) taken recently, each
// until its timestamp leaves the window, so that the same signed request
// sent again within the window is refused: past the window the timestamp
// check refuses it. Memory is bounded: past its capacity the oldest entry
// is forgotten first, and a replay of it is then only a duplicate of its
// message (not published again). It is one process's memory: with
// several servers, a replay to another is again only a duplicate. Safe
// for concurrent use.
type ReplayMemory struct {
	mu   sync.Mutex
	max  int
	seen map[[sha256.Size]byte]uint64 // MAC -> generation of its entry
	// queue holds the entries in the order they were reserved.
	queue []replayEntry
	head  int
	gen   uint64
}

type replayEntry struct {
	mac   [sha256.Size]byte
	until time.Time
	gen   uint64
}

// NewReplayMemory returns a ReplayMemory of capacity max (entries; 0 is
// DefaultReplayMemory).
func NewReplayMemory(max int) *ReplayMemory {
	if max <= 0 {
		max = DefaultReplayMemory
	}
	return &ReplayMemory{max: max, seen: map[[sha256.Size]byte]uint64{}}
}

// Reserve remembers mac until until, and reports whether it was new:
// false when mac is remembered already (a replay). now drops the entries
// whose until has passed.
func (m *ReplayMemory) Reserve(mac [sha256.Size]byte, until, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(now)
	if _, ok := m.seen[mac]; ok {
		return false
	}
	m.gen++
	m.seen[mac] = m.gen
	m.queue = append(m.queue, replayEntry{mac: mac, until: until, gen: m.gen})
	return true
}

// Release forgets mac, reserved by a request that was then not taken (a
// 4xx or 5xx answer), so that the sender's retry of it is not a replay.
func (m *ReplayMemory) Release(mac [sha256.Size]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, mac)
}

// Len returns how many signatures are remembered.
func (m *ReplayMemory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// drop forgets the entries at the head of the queue that expired by now,
// and the oldest ones past the capacity.
func (m *ReplayMemory) drop(now time.Time) {
	for m.head < len(m.queue) {
		e := m.queue[m.head]
		live := m.seen[e.mac] == e.gen
		if live && !now.After(e.until) && len(m.seen) < m.max {
			break
		}
		if live {
			delete(m.seen, e.mac)
		}
		m.queue[m.head] = replayEntry{}
		m.head++
	}
	// Compact once the dead head is as long as the rest.
	if m.head > 0 && m.head >= len(m.queue)-m.head {
		m.queue = append(m.queue[:0], m.queue[m.head:]...)
		m.head = 0
	}
}
