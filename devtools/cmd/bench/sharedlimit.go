package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/extractq/extractq/devtools/internal/devstack"
	"github.com/extractq/extractq/queue"
)

// limitPhase is one stretch of scenario G with a fixed number of worker
// replicas, and what the simulator answered during it.
type limitPhase struct {
	Replicas int
	Took     time.Duration
	OK, Over float64 // 200s, and 429s for the enforced limit
}

// sharedRPM is the provider limit scenario G enforces, and the limit
// every worker is configured with.
const sharedRPM = 3000

// scenarioG: worker replicas share one provider limit (provider.share
// replicas, queue.LimitShare). The simulator enforces 3000 requests a
// minute, its bucket starting empty; every worker is configured with the
// whole 3000. Replicas are added and removed between phases (4, then 6,
// then 3); each phase reports the calls answered per minute against the
// limit and the share answered 429. With control set, each worker limits
// only itself (provider.share none): the replicas ask for several times
// the limit, and the 429s show it.
func scenarioG(ctx context.Context, env benchEnv, phase time.Duration, control bool) ([]result, error) {
	share, name := "replicas", "g"
	if control {
		share, name = "none", "g-control"
	}
	cfg := fmt.Sprintf("worker:\n  concurrency: 32\nprovider:\n  requests_per_minute: %d\n  share: %s\n  max_replicas: 8\n  share_heartbeat: 1s\n"+
		"simulator:\n  requests_per_minute: %d\n  limits_start_empty: true\n  latency_median: 150ms\n  latency_p99: 600ms\n",
		sharedRPM, share, sharedRPM)
	s, err := newStack(ctx, env, name, cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.js.DeleteKeyValue(dctx, queue.LimitBucket(s.nats))
	}()
	// Enough waiting work for every phase at the limit (each message
	// takes one or two calls), loaded before the simulator starts, so its
	// bucket is empty when the first phase begins.
	total := 3 * phase
	if _, err := s.load(ctx, int(float64(sharedRPM)*total.Minutes())+500); err != nil {
		return nil, err
	}
	if err := s.startSim(ctx); err != nil {
		return nil, err
	}
	var workers []*devstack.Proc
	scale := func(n int) error {
		for len(workers) < n {
			p, err := s.startWorker(fmt.Sprintf("worker-%d", len(workers)))
			if err != nil {
				return err
			}
			workers = append(workers, p)
		}
		for len(workers) > n {
			last := workers[len(workers)-1]
			last.Stop(syscall.SIGTERM, 30*time.Second)
			workers = workers[:len(workers)-1]
		}
		return nil
	}
	var phases []limitPhase
	for _, n := range []int{4, 6, 3} {
		if err := scale(n); err != nil {
			return nil, err
		}
		before, err := s.simStats()
		if err != nil {
			return nil, err
		}
		start := time.Now()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(phase):
		}
		after, err := s.simStats()
		if err != nil {
			return nil, err
		}
		p := limitPhase{Replicas: n, Took: time.Since(start),
			OK:   statusCount(after, "200") - statusCount(before, "200"),
			Over: statusCount(after, "429") - statusCount(before, "429")}
		phases = append(phases, p)
		fmt.Fprintf(os.Stderr, "bench: %s: %d replicas: %.0f answered, %.0f 429s in %s\n", name, n, p.OK, p.Over, p.Took.Round(time.Second))
	}
	var rs []result
	for i, p := range phases {
		perMin := p.OK / p.Took.Minutes()
		over := ratio(p.Over, p.OK+p.Over)
		r := result{Scenario: "G", Unit: "calls/min", Measured: perMin, Limit: sharedRPM,
			Name: fmt.Sprintf("shared provider limit, phase %d: %d replicas, 3000 requests/min enforced", i+1, p.Replicas),
			Goal: ">= 0.95, 429s <= 2%", Extra: map[string]float64{"replicas": float64(p.Replicas), "share_429": over,
				"seconds": p.Took.Seconds()}}
		if control {
			r.Name = strings.Replace(r.Name, "shared provider limit", "control, per-process limits", 1)
			r.Goal = "overshoot: 429s > 2%"
		}
		r.Ratio = ratio(r.Measured, r.Limit)
		if control {
			r.Pass = over > 0.02
		} else {
			r.Pass = r.Ratio >= 0.95 && over <= 0.02
		}
		rs = append(rs, r)
	}
	return rs, nil
}
