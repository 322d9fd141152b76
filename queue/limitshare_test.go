package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/servertest"
)

// replica is one LimitShare under test, with the shares and pauses it
// was given.
type replica struct {
	id     string
	ls     *queue.LimitShare
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	share  float64
	seen   []float64   // every share given, in order
	at     []time.Time // when each was given
	pauses []string
}

// given reports whether the replica was given share since its i-th share.
func (r *replica) given(share float64, since int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen[min(since, len(r.seen)):] {
		if s == share {
			return true
		}
	}
	return false
}

func (r *replica) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *replica) current() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.share
}

func startReplica(t *testing.T, url, id string, n config.NATS, maxReplicas int) *replica {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, nc: nc, done: make(chan struct{})}
	r.ls, err = queue.NewLimitShare(queue.LimitShareConfig{JS: js, Conn: nc, NATS: n, ID: id, Heartbeat: 100 * time.Millisecond,
		MaxReplicas: maxReplicas,
		SetShare: func(s float64) {
			r.mu.Lock()
			r.share, r.seen, r.at = s, append(r.seen, s), append(r.at, time.Now())
			r.mu.Unlock()
		},
		Pause: func(until time.Time, cause string) {
			r.mu.Lock()
			r.pauses = append(r.pauses, cause)
			r.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := r.ls.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	}()
	t.Cleanup(func() { r.stop(); nc.Close() })
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// waitShares waits until every replica's share is want.
func waitShares(t *testing.T, want float64, rs ...*replica) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		got := ""
		for _, r := range rs {
			got += fmt.Sprintf(" %s=%.3f", r.id, r.current())
			ok = ok && r.current() == want
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shares%s; want %.3f each", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLimitShare: replicas take 1/n of the limit for n live replicas,
// rebalance when one joins, stops or dies (its key ages out), fall back
// to 1/max_replicas when the bucket cannot be reached, and hear each
// other's pauses, not their own.
func TestLimitShare(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, "")
	url := servertest.URL(srv, "nats")
	n := config.Default().NATS
	n.Stream, n.SubjectPrefix = "SHARE", "share"

	a := startReplica(t, url, "a", n, 10)
	waitShares(t, 1, a)
	b := startReplica(t, url, "b", n, 10)
	c := startReplica(t, url, "c", n, 10)
	waitShares(t, 1.0/3, a, b, c)

	// Stopped: its key is purged, the others rebalance.
	c.stop()
	waitShares(t, 0.5, a, b)

	// Died: no purge; its key ages out after three heartbeats.
	d := startReplica(t, url, "d", n, 10)
	waitShares(t, 1.0/3, a, b, d)
	d.cancel()
	d.nc.Close() // before Run can purge its key
	<-d.done
	waitShares(t, 0.5, a, b)

	// A pause reaches the others, not the one announcing it.
	a.ls.Announce(time.Now().Add(time.Minute), "quota_exhausted")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		got := len(b.pauses)
		b.mu.Unlock()
		if got == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b heard %d pauses, want 1", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.mu.Lock()
	if len(a.pauses) != 0 {
		t.Errorf("a heard its own pause")
	}
	a.mu.Unlock()

	// The bucket lost (as with a server that lost its store): the
	// replicas make it again and count each other again.
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := a.count(), b.count()
	if err := js.DeleteKeyValue(t.Context(), queue.LimitBucket(n)); err != nil {
		t.Fatal(err)
	}
	// The first to beat after it falls back for a heartbeat and makes
	// the bucket again (the other may put its key there before it
	// notices); both then count each other again.
	deadline = time.Now().Add(10 * time.Second)
	for !((a.given(0.1, na) || b.given(0.1, nb)) && a.current() == 0.5 && b.current() == 0.5) {
		if time.Now().After(deadline) {
			t.Fatalf("after the bucket was deleted: a %v, b %v; want a fall back to 0.1, then 0.5 each", a.seen, b.seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitShares(t, 0.5, a, b)

	// The server gone: each takes 1/max_replicas.
	srv.Shutdown()
	waitShares(t, 0.1, a, b)
}

// TestLimitShareAcrossPools: with a pool of workers per schema, the
// replicas of every pool share the one provider limit: a replica of each
// of two pools takes half.
// TestLimitShareJoinWaits: a replica joining takes its larger share only
// at its second count, a heartbeat after the first, when the others have
// seen it and lowered theirs; taking it at once overshot the limit (bench
// scenario G).
func TestLimitShareJoinWaits(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, "")
	url := servertest.URL(srv, "nats")
	n := config.Default().NATS
	n.Stream, n.SubjectPrefix = "JOIN", "join"
	a := startReplica(t, url, "a", n, 4)
	waitShares(t, 1, a)
	b := startReplica(t, url, "b", n, 4)
	waitShares(t, 0.5, a, b)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) != 2 || b.seen[0] != 0.25 || b.seen[1] != 0.5 {
		t.Fatalf("b was given %v, want [0.25 0.5]: 1/max_replicas, then half", b.seen)
	}
	if gap := b.at[1].Sub(b.at[0]); gap < 90*time.Millisecond {
		t.Fatalf("b took half %v after starting, want at least a heartbeat (100ms): the others had not lowered theirs yet", gap)
	}
}

func TestLimitShareAcrossPools(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, "")
	url := servertest.URL(srv, "nats")
	pool := func(schema string) *config.Config {
		c := config.Default()
		c.NATS.Stream, c.NATS.SubjectPrefix = "POOLS", "pools"
		c.NATS.Consumers, c.Worker.Schema = config.ConsumersPerSchema, schema
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := startReplica(t, url, "customer_message-1", pool("customer_message").NATS, 10)
	b := startReplica(t, url, "return_request-1", pool("return_request").NATS, 10)
	waitShares(t, 0.5, a, b)
}
