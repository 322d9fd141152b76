package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// eventKind is one kind of fault the harness injects.
type eventKind int

const (
	killWorker      eventKind = iota // SIGKILL one worker, start it again
	restartNATS                      // stop NATS gracefully, start it again on the same store
	restartPostgres                  // fast shutdown of Postgres, start it again on the same data
)

func (k eventKind) String() string {
	switch k {
	case killWorker:
		return "kill worker"
	case restartNATS:
		return "restart NATS"
	case restartPostgres:
		return "restart Postgres"
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// event is one planned fault. It fires once the share of messages with an
// outcome reaches At, so it lands at a random moment of the run whatever
// the machine's speed.
type event struct {
	Kind eventKind
	At   float64 // fraction of messages done, in [planFrom, planTo)
	// Worker is the index of the worker to kill (killWorker).
	Worker int
	// Delay is waited after At is reached, before the fault.
	Delay time.Duration
	// Down is how long the worker or service stays down.
	Down time.Duration
}

// The events fire while between planFrom and planTo of the messages are
// done.
const (
	planFrom = 0.03
	planTo   = 0.85
)

// planEvents draws the faults of one run from rng: kills worker kills, and
// one restart of NATS and of Postgres when asked, in order of At.
func planEvents(rng *rand.Rand, kills, workers int, nats, postgres bool) []event {
	var evs []event
	draw := func(k eventKind) event {
		e := event{Kind: k, At: planFrom + rng.Float64()*(planTo-planFrom),
			Delay: time.Duration(rng.Int64N(int64(time.Second)))}
		switch k {
		case killWorker:
			e.Worker = rng.IntN(workers)
			e.Down = 200*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		default:
			e.Down = time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		return e
	}
	for range kills {
		evs = append(evs, draw(killWorker))
	}
	if nats {
		evs = append(evs, draw(restartNATS))
	}
	if postgres {
		evs = append(evs, draw(restartPostgres))
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	return evs
}
