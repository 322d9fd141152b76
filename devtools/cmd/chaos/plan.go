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
	stopWorker                       // SIGSTOP one worker for longer than the ack wait, then SIGCONT
	cutLink                          // cut one link through its proxy (open connections reset), then restore it
	killIngest                       // SIGKILL ingest mid-file, run it again on the same file
	providerOutage                   // the simulator refuses every call for longer than the breaker cooldown
	restartNATS                      // stop NATS gracefully, start it again on the same store
	restartPostgres                  // fast shutdown of Postgres, start it again on the same data
	loseStore                        // stop NATS, delete its store, start it again empty
	killNATSLeader                   // SIGKILL the cluster's stream leader, then the new one, start both again
)

func (k eventKind) String() string {
	switch k {
	case killWorker:
		return "kill worker"
	case stopWorker:
		return "SIGSTOP worker"
	case cutLink:
		return "cut"
	case killIngest:
		return "kill ingest"
	case providerOutage:
		return "provider outage"
	case restartNATS:
		return "restart NATS"
	case restartPostgres:
		return "restart Postgres"
	case loseStore:
		return "lose the stream's store"
	case killNATSLeader:
		return "SIGKILL the stream leader, then a second NATS server"
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// link is one network path the harness can cut: each worker and ingest
// reach NATS and Postgres through a proxy of their own.
type link int

const (
	workerNATS link = iota
	workerPostgres
	ingestNATS
	ingestPostgres
	numLinks
)

func (l link) String() string {
	switch l {
	case workerNATS:
		return "worker↔NATS"
	case workerPostgres:
		return "worker↔Postgres"
	case ingestNATS:
		return "ingest↔NATS"
	case ingestPostgres:
		return "ingest↔Postgres"
	}
	return fmt.Sprintf("link(%d)", int(l))
}

// ingests reports whether the link is ingest's.
func (l link) ingests() bool { return l == ingestNATS || l == ingestPostgres }

// trigger says what moment of the run an event waits for.
type trigger int

const (
	// byDone: the share At of the messages has an outcome.
	byDone trigger = iota
	// bySeconds: After has passed since ingest started, so in a big run
	// the fault lands while ingest still runs.
	bySeconds
	// byStored: ingest has stored the share At of the messages; for the
	// faults of ingest, which land mid-file.
	byStored
)

// event is one planned fault.
type event struct {
	Kind    eventKind
	Trigger trigger
	At      float64       // share of messages, for byDone and byStored
	After   time.Duration // since ingest started, for bySeconds
	// Worker is the index of the worker killed, stopped or cut.
	Worker int
	// Link is the link cut (cutLink).
	Link link
	// Delay is waited once the trigger is reached, before the fault.
	Delay time.Duration
	// Down is how long the process, service or link stays down.
	Down time.Duration
}

// when says when the event fires, for the plan's log line.
func (e event) when() string {
	switch e.Trigger {
	case bySeconds:
		return fmt.Sprintf("%.1fs after ingest started", e.After.Seconds())
	case byStored:
		return fmt.Sprintf("%.0f%% stored by ingest", 100*e.At)
	}
	return fmt.Sprintf("%.0f%% done", 100*e.At)
}

// what names the event's target, for the plan's log line.
func (e event) what() string {
	switch e.Kind {
	case killWorker, stopWorker:
		return fmt.Sprintf("%s %d", e.Kind, e.Worker+1)
	case cutLink:
		if e.Link.ingests() {
			return fmt.Sprintf("cut %s", e.Link)
		}
		return fmt.Sprintf("cut worker %d's %s", e.Worker+1, e.Link)
	}
	return e.Kind.String()
}

// target is what the event takes down: faults on one target are injected
// one at a time.
func (e event) target() string {
	switch e.Kind {
	case killWorker, stopWorker:
		return fmt.Sprintf("worker %d", e.Worker+1)
	case cutLink:
		if e.Link.ingests() {
			return "ingest"
		}
		return fmt.Sprintf("worker %d", e.Worker+1)
	case killIngest:
		return "ingest"
	case providerOutage:
		return "provider"
	case restartNATS, loseStore, killNATSLeader:
		return "NATS"
	case restartPostgres:
		return "Postgres"
	}
	return e.Kind.String()
}

// The byDone events fire while between planFrom and planTo of the
// messages are done; the byStored ones between storedFrom and storedTo of
// them are stored.
const (
	planFrom   = 0.03
	planTo     = 0.85
	storedFrom = 0.05
	storedTo   = 0.6
	// The store is lost while between lossFrom and lossTo of the messages
	// are done, with the rest queued.
	lossFrom = 0.2
	lossTo   = 0.6
)

// plan is what planEvents draws faults for.
type plan struct {
	Kills, Stops, Cuts, IngestKills int
	Workers                         int
	NATS, Postgres, StoreLoss       bool
	// LeaderKills counts the kills of the cluster's stream leader.
	LeaderKills int
	// Outage is how long the provider outage lasts; 0 means none.
	Outage time.Duration
	// Window: a bySeconds event fires between 1s and Window after ingest
	// started.
	Window time.Duration
	// AckWait is the consumer's ack wait: a SIGSTOP lasts 2s to 5s longer.
	AckWait time.Duration
	// CutFor is how long a link stays cut; 0 means a random 2s to 8s.
	CutFor time.Duration
}

// planEvents draws the faults of one run from rng, in a fixed order of
// kinds so that a seed always draws the same plan. Ingest's faults
// (its kills and the cuts of its links) fire by the share stored, the
// store loss by the share done; every other fault, one in two, by the
// share done or by seconds since ingest started. The cuts go round the links in an order drawn from rng.
func planEvents(rng *rand.Rand, p plan) []event {
	var evs []event
	draw := func(k eventKind) event {
		e := event{Kind: k, Delay: time.Duration(rng.Int64N(int64(time.Second)))}
		if rng.IntN(2) == 0 {
			e.Trigger, e.At = byDone, planFrom+rng.Float64()*(planTo-planFrom)
		} else {
			window := max(p.Window, 2*time.Second)
			e.Trigger, e.After = bySeconds, time.Second+time.Duration(rng.Int64N(int64(window-time.Second)))
		}
		switch k {
		case killWorker:
			e.Worker = rng.IntN(p.Workers)
			e.Down = 200*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		case stopWorker:
			e.Worker = rng.IntN(p.Workers)
			e.Down = p.AckWait + 2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		case providerOutage:
			e.Down = p.Outage
		default:
			e.Down = time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		return e
	}
	byStoredShare := func(e event) event {
		e.Trigger, e.After, e.At = byStored, 0, storedFrom+rng.Float64()*(storedTo-storedFrom)
		return e
	}
	for range p.Kills {
		evs = append(evs, draw(killWorker))
	}
	for range p.Stops {
		evs = append(evs, draw(stopWorker))
	}
	links := rng.Perm(int(numLinks))
	for i := range p.Cuts {
		e := draw(cutLink)
		e.Link = link(links[i%len(links)])
		e.Worker = rng.IntN(p.Workers)
		e.Down = p.CutFor
		if e.Down <= 0 {
			e.Down = 2*time.Second + time.Duration(rng.Int64N(int64(6*time.Second)))
		}
		if e.Link.ingests() {
			e = byStoredShare(e)
		}
		evs = append(evs, e)
	}
	for range p.IngestKills {
		e := byStoredShare(draw(killIngest))
		e.Down = 200*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		evs = append(evs, e)
	}
	if p.Outage > 0 {
		evs = append(evs, draw(providerOutage))
	}
	if p.NATS {
		evs = append(evs, draw(restartNATS))
	}
	if p.Postgres {
		evs = append(evs, draw(restartPostgres))
	}
	if p.StoreLoss {
		// By the share done, so that runs are queued when the store goes.
		e := draw(loseStore)
		e.Trigger, e.After, e.At = byDone, 0, lossFrom+rng.Float64()*(lossTo-lossFrom)
		evs = append(evs, e)
	}
	for range p.LeaderKills {
		// By the share done, so that the batch is under way.
		e := draw(killNATSLeader)
		e.Trigger, e.After, e.At = byDone, 0, planFrom+rng.Float64()*(lossTo-planFrom)
		evs = append(evs, e)
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].Trigger != evs[j].Trigger {
			return evs[i].Trigger < evs[j].Trigger
		}
		return evs[i].At < evs[j].At || (evs[i].At == evs[j].At && evs[i].After < evs[j].After)
	})
	return evs
}
