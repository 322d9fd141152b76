package main

import (
	"context"
	"fmt"
	"time"

	"github.com/extractq/extractq/devtools/internal/devstack"
)

// workerProc is one cmd/worker process slot; a restart reuses its log and
// health port.
type workerProc struct {
	index      int
	bin        string
	logPath    string
	healthPort int
	env        []string
	proc       *devstack.Proc
	starts     int
	kills      int
	// down is set while the harness means the worker to be stopped, so
	// its exit is not taken for a crash.
	down bool
	// stopped is set while the harness holds the worker SIGSTOPped.
	stopped bool
	// crashed is set from a crash until the worker is started again.
	crashed   bool
	crashedAt time.Time
}

// start starts the worker.
func (w *workerProc) start() error {
	p, err := devstack.Start(devstack.Spec{Name: fmt.Sprintf("worker %d", w.index), LogPath: w.logPath, Env: w.env, Args: []string{
		w.bin, "-health-addr", devstack.Addr(w.healthPort), "-log-level", "info",
	}})
	if err != nil {
		return err
	}
	w.proc = p
	w.starts++
	return nil
}

// waitReady waits until the worker's /readyz answers 200: it consumes, and
// reaches NATS and Postgres.
func (w *workerProc) waitReady(ctx context.Context, timeout time.Duration) error {
	return devstack.WaitHTTP(ctx, "http://"+devstack.Addr(w.healthPort)+"/readyz", w.proc, timeout)
}
