package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/internal/devstack"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/app"
	"github.com/extractq/extractq/pipeline"
)

// options are the harness's flags.
type options struct {
	Messages        int
	Kills           int
	RestartNATS     bool
	RestartPostgres bool
	Workers         int
	Concurrency     int
	Seed            int64
	Timeout         time.Duration
	Keep            bool
	IngestRetries   int
	Source          string // JSONL the messages are drawn from; default testdata/abcd/messages.jsonl
	PGBin           string // directory of initdb and postgres; default found
	LatencyMedian   time.Duration
	LatencyP99      time.Duration
	AckWait         time.Duration
	MaxDeliver      int
	// Outage, when set, is how long NATS and Postgres stay down at their
	// restart; default a random 1s to 3s.
	Outage time.Duration
}

// harness runs one chaos run. Its fields are set up step by step by run;
// cleanup undoes whatever was set up.
type harness struct {
	o     options
	out   io.Writer
	start time.Time
	outMu sync.Mutex

	repo    string
	dir     string
	binDir  string
	cfgPath string
	cfg     *config.Config
	schemas map[string]*pipeline.Schema

	pg      *devstack.Postgres
	nats    *devstack.NATS
	sim     *simulator
	pool    *pgxpool.Pool
	ingest  *devstack.Proc
	workers []*workerProc
	wmu     sync.Mutex // guards each workers[i].proc, swapped by restarts

	// done and total are the progress: messages whose run has an outcome,
	// and the messages expected (the generated count while ingest runs,
	// then the count stored).
	done, total atomic.Int64

	problems []string   // failures besides the checks; each fails the run
	pmu      sync.Mutex // guards problems and ingest
}

// logf prints one progress line, stamped with the time since the start.
func (h *harness) logf(format string, a ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.out, "[%6.1fs] %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(format, a...))
}

// problem records a failure that is not one of the final checks. The
// first line of the message sums it up; later lines (log excerpts) are
// printed only here.
func (h *harness) problem(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	h.pmu.Lock()
	h.problems = append(h.problems, msg)
	h.pmu.Unlock()
	h.logf("PROBLEM: %s", msg)
}

// run is the whole harness: it returns the exit status and prints the
// final line last (unless setting up failed or it was interrupted).
func run(ctx context.Context, o options, out io.Writer) int {
	h := &harness{o: o, out: out, start: time.Now()}
	defer h.cleanup()
	v, err := h.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			h.logf("interrupted: %v; stopping everything", err)
			if h.o.Keep && h.dir != "" {
				fmt.Fprintf(out, "kept %s\n", h.dir)
			}
			return 130
		}
		h.logf("FAILED: %v", err)
		h.printLogTails()
		if h.o.Keep && h.dir != "" {
			fmt.Fprintf(out, "kept %s (logs, data, config.yaml, messages.jsonl)\n", h.dir)
		}
		return 1
	}
	h.report(v)
	if h.o.Keep {
		fmt.Fprintf(out, "kept %s (logs, data, config.yaml, messages.jsonl)\n", h.dir)
	}
	fmt.Fprintln(out, v.finalLine())
	if !v.ok() || len(h.problems) > 0 {
		return 1
	}
	return 0
}

func (h *harness) run(ctx context.Context) (verdict, error) {
	var v verdict
	if err := h.setup(ctx); err != nil {
		return v, err
	}
	evs := planEvents(rand.New(rand.NewPCG(uint64(h.o.Seed), 1)), h.o.Kills, h.o.Workers, h.o.RestartNATS, h.o.RestartPostgres)
	for i, e := range evs {
		if h.o.Outage > 0 && e.Kind != killWorker {
			evs[i].Down = h.o.Outage
		}
		h.logf("plan %d/%d: %s at %.0f%% done", i+1, len(evs), e.Kind, 100*e.At)
	}

	msgPath := filepath.Join(h.dir, "messages.jsonl")
	f, err := os.Create(msgPath)
	if err != nil {
		return v, err
	}
	err = writeMessages(f, h.o.Source, h.o.Messages)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return v, fmt.Errorf("writing messages: %w", err)
	}
	h.total.Store(int64(h.o.Messages))

	ingestDone := make(chan struct{})
	ictx, cancelIngest := context.WithCancel(ctx)
	defer cancelIngest()
	h.logf("ingest: %d messages from %s", h.o.Messages, filepath.Base(h.o.Source))
	go func() {
		defer close(ingestDone)
		h.runIngest(ictx, msgPath)
	}()

	chaosErr := make(chan error, 1)
	cctx, cancelChaos := context.WithCancel(ctx)
	defer cancelChaos()
	go func() { chaosErr <- h.chaos(cctx, evs) }()

	if err := h.waitOutcomes(ctx, ingestDone, chaosErr); err != nil {
		return v, err
	}
	cancelChaos()

	h.drain(ctx)
	h.stopWorkers()
	cctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	h.logf("checking: outcomes, duplicates, results validated again against their schema")
	return checkStore(cctx2, h.pool, h.schemas, h.o.Messages, h.sim.served())
}

// setup builds the commands and starts Postgres, NATS, the simulator and
// the workers, each private to this run.
func (h *harness) setup(ctx context.Context) error {
	var err error
	if h.repo, err = devstack.FindRepo(); err != nil {
		return err
	}
	if h.o.Source == "" {
		h.o.Source = filepath.Join(h.repo, "testdata", "abcd", "messages.jsonl")
	}
	if h.dir, err = os.MkdirTemp("", "extractq-chaos-"); err != nil {
		return err
	}
	// Postgres runs as its own OS user when the harness is root: it must be
	// able to reach its directory inside this one.
	if err := os.Chmod(h.dir, 0o711); err != nil {
		return err
	}
	h.logf("work directory %s (seed %d)", h.dir, h.o.Seed)

	h.binDir = filepath.Join(h.dir, "bin")
	if err := devstack.Build(ctx, h.repo, h.binDir, "./cmd/worker", "./cmd/ingest", "./cmd/migrate", "./devtools/cmd/natsd"); err != nil {
		return err
	}
	h.logf("built worker, ingest, migrate and natsd")

	if err := h.writeConfig(); err != nil {
		return err
	}

	ports := make([]int, 3+h.o.Workers)
	for i := range ports {
		if ports[i], err = devstack.FreePort(); err != nil {
			return err
		}
	}
	pgBin, err := devstack.FindPGBin(h.o.PGBin)
	if err != nil {
		return err
	}
	if h.pg, err = devstack.NewPostgres(ctx, pgBin, filepath.Join(h.dir, "pg"), ports[0]); err != nil {
		return err
	}
	if err := h.pg.Start(ctx); err != nil {
		return err
	}
	h.logf("postgres %s on 127.0.0.1:%d", filepath.Base(filepath.Dir(pgBin)), h.pg.Port)
	migrateEnv := []string{"DATABASE_URL=" + h.pg.URL("extractq")}
	if err := h.runOnce(ctx, "migrate", migrateEnv, filepath.Join(h.binDir, "migrate"), "up"); err != nil {
		return err
	}
	if h.pool, err = pgxpool.New(ctx, h.pg.URL("extractq")); err != nil {
		return err
	}

	h.nats = &devstack.NATS{Bin: filepath.Join(h.binDir, "natsd"), Dir: filepath.Join(h.dir, "nats"), Port: ports[1]}
	if err := h.nats.Start(ctx); err != nil {
		return err
	}
	h.logf("nats (devtools/cmd/natsd, JetStream) on 127.0.0.1:%d", h.nats.Port)

	simCfg := h.cfg.Simulator
	simCfg.Seed = h.o.Seed
	if h.sim, err = newSimulator(simCfg, h.o.LatencyMedian, h.o.LatencyP99, h.o.Seed, ports[2]); err != nil {
		return err
	}
	h.logf("LLM simulator on %s: latency median %s, p99 %s; the demo's fault rates", h.sim.ln.Addr(), h.o.LatencyMedian, h.o.LatencyP99)

	for i := range h.o.Workers {
		w := &workerProc{index: i + 1, bin: filepath.Join(h.binDir, "worker"), healthPort: ports[3+i],
			logPath: filepath.Join(h.dir, fmt.Sprintf("worker-%d.log", i+1)), env: h.env()}
		if err := w.start(); err != nil {
			return err
		}
		h.workers = append(h.workers, w)
	}
	for _, w := range h.workers {
		if err := w.waitReady(ctx, 60*time.Second); err != nil {
			return err
		}
	}
	h.logf("%d workers ready, %d messages in flight each, ack wait %s, max deliver %d",
		h.o.Workers, h.cfg.Worker.Concurrency, h.cfg.Worker.AckWait, h.cfg.Worker.MaxDeliver)
	return nil
}

// writeConfig writes the run's configuration file and loads it back.
func (h *harness) writeConfig() error {
	h.cfgPath = filepath.Join(h.dir, "config.yaml")
	body := fmt.Sprintf(`# Written by devtools/cmd/chaos for one run.
worker:
  concurrency: %d
  ack_wait: %s
  max_deliver: %d
  in_progress_every: %s
simulator:
  seed: %d
`, h.o.Concurrency, h.o.AckWait, h.o.MaxDeliver, max(h.o.AckWait/3, 100*time.Millisecond), h.o.Seed)
	if err := os.WriteFile(h.cfgPath, []byte(body), 0o644); err != nil {
		return err
	}
	cfg, err := app.LoadConfig(h.cfgPath, app.Env{})
	if err != nil {
		return err
	}
	h.cfg = cfg
	entries, err := app.LoadSchemas(cfg)
	if err != nil {
		return err
	}
	h.schemas = map[string]*pipeline.Schema{}
	for id, e := range entries {
		h.schemas[id] = e.Schema
	}
	return nil
}

// env is the environment of every command the harness starts: the private
// services and the run's configuration, nothing inherited.
func (h *harness) env() []string {
	return []string{
		"DATABASE_URL=" + h.pg.URL("extractq"),
		"NATS_URL=" + h.nats.URL(),
		"LLM_BASE_URL=" + h.sim.baseURL(),
		"LLM_API_KEY=simulator",
		"LLM_MODEL=",
		"CONFIG=" + h.cfgPath,
		"HEALTH_ADDR=",
		"LOG_LEVEL=info",
	}
}

// runOnce runs a command with env to its end, logging to <name>.log.
func (h *harness) runOnce(ctx context.Context, name string, env []string, args ...string) error {
	return devstack.Run(ctx, devstack.Spec{Name: name, LogPath: filepath.Join(h.dir, name+".log"), Env: env, Args: args})
}

// runIngest runs cmd/ingest on the messages. An ingest that fails is a
// problem of the run; it is then run again on the same file, as an
// operator would (a stopped ingest's stored runs are published by the
// next ingest of the file), up to -ingest-retries times, so the checks
// still cover every message.
func (h *harness) runIngest(ctx context.Context, path string) {
	for attempt := 0; ; attempt++ {
		var stdout bytes.Buffer
		p, err := h.startIngest(path, &stdout)
		if err != nil {
			h.problem("starting ingest: %v", err)
			return
		}
		h.pmu.Lock()
		h.ingest = p
		h.pmu.Unlock()
		select {
		case <-p.Done():
		case <-ctx.Done():
			p.Stop(syscall.SIGTERM, 5*time.Second)
			return
		}
		if h.ingestFinished(p, stdout.Bytes()) || attempt >= h.o.IngestRetries {
			return
		}
		h.logf("ingest: running it again on the same file in 5s (%d of %d)", attempt+1, h.o.IngestRetries)
		if sleepCtx(ctx, 5*time.Second) != nil {
			return
		}
	}
}

// startIngest starts cmd/ingest -json on the messages, its report going
// to stdout and its logs to ingest.log.
func (h *harness) startIngest(path string, stdout *bytes.Buffer) (*devstack.Proc, error) {
	return devstack.Start(devstack.Spec{Name: "ingest", LogPath: filepath.Join(h.dir, "ingest.log"), Env: h.env(), Stdout: stdout,
		Args: []string{filepath.Join(h.binDir, "ingest"), "-json", "-quiet", "-log-level", "info", path}})
}

// ingestFinished reports the ingest's result and whether it succeeded; a
// failed ingest is a problem of the run.
func (h *harness) ingestFinished(p *devstack.Proc, stdout []byte) bool {
	var rep ingest.Report
	jerr := json.Unmarshal(stdout, &rep)
	if p.Err() != nil || jerr != nil {
		h.problem("ingest failed (%s): %s\n%s", p.ExitStatus(), lastLineWith(p.LogPath(), "stopped:"), devstack.Tail(p.LogPath(), 6))
		return false
	}
	h.logf("ingest done: %d lines, %d published, %d duplicates, %d rejected",
		rep.Lines, rep.Published, rep.Duplicates, rep.Rejected)
	if rep.Rejected > 0 {
		h.problem("ingest rejected %d lines", rep.Rejected)
	}
	return true
}

// progressSQL counts the stored runs and those with an outcome status.
const progressSQL = `SELECT count(*), count(*) FILTER (WHERE status <> 'queued') FROM runs`

// waitOutcomes polls Postgres until every stored message has an outcome,
// ingest has ended and every planned fault was injected; or until the
// timeout. It also restarts a worker that died on its own, as a problem.
func (h *harness) waitOutcomes(ctx context.Context, ingestDone <-chan struct{}, chaosErr <-chan error) error {
	deadline := time.Now().Add(h.o.Timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	ingested, chaosDone := false, false
	var stored, done int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-chaosErr:
			if err != nil {
				return err
			}
			chaosDone = true
		case <-ingestDone:
			ingested = true
			ingestDone = nil
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := h.pool.QueryRow(qctx, progressSQL).Scan(&stored, &done)
		cancel()
		if err == nil {
			h.done.Store(done)
			if ingested {
				h.total.Store(stored)
			}
		}
		h.checkWorkers()
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			h.logf("progress: %d/%d messages have an outcome (%d stored), simulator answered %d calls",
				done, h.o.Messages, stored, h.sim.served())
		}
		if ingested && chaosDone && err == nil && done == stored {
			h.logf("every stored message has an outcome: %d/%d", done, h.o.Messages)
			return nil
		}
		if time.Now().After(deadline) {
			h.problem("timed out after %s: %d of %d stored messages have an outcome", h.o.Timeout, done, stored)
			return nil
		}
	}
}

// checkWorkers restarts workers that exited without being killed, each
// at most every 2s.
func (h *harness) checkWorkers() {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	for _, w := range h.workers {
		switch {
		case !w.proc.Exited():
			w.crashed = false
		case w.down:
			// Killed or stopped by the harness.
		case !w.crashed:
			h.problem("worker %d (pid %d) exited on its own: %s: %s\n%s",
				w.index, w.proc.Pid(), w.proc.ExitStatus(), lastErrorLog(w.logPath), devstack.Tail(w.logPath, 4))
			w.crashed, w.crashedAt = true, time.Now()
		case time.Since(w.crashedAt) >= 2*time.Second:
			if err := w.start(); err != nil {
				h.problem("restarting worker %d: %v", w.index, err)
				w.crashedAt = time.Now()
			} else {
				w.crashed = false
				h.logf("worker %d started again (pid %d) after its crash", w.index, w.proc.Pid())
			}
		}
	}
}

// chaos injects the planned faults, each once its share of messages is
// done. It returns an error when a service cannot be brought back.
func (h *harness) chaos(ctx context.Context, evs []event) error {
	for i, e := range evs {
		for float64(h.done.Load()) < e.At*float64(h.total.Load()) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err := sleepCtx(ctx, e.Delay); err != nil {
			return err
		}
		at := fmt.Sprintf("fault %d/%d at %d/%d done", i+1, len(evs), h.done.Load(), h.total.Load())
		switch e.Kind {
		case killWorker:
			w := h.workers[e.Worker]
			h.wmu.Lock()
			w.down = true
			p := w.proc
			h.wmu.Unlock()
			h.logf("%s: SIGKILL worker %d (pid %d)", at, w.index, p.Pid())
			p.Kill()
			w.kills++
			if err := sleepCtx(ctx, e.Down); err != nil {
				return err
			}
			h.wmu.Lock()
			err := w.start()
			w.down = false
			pid := w.proc.Pid()
			h.wmu.Unlock()
			if err != nil {
				return fmt.Errorf("restarting worker %d: %w", w.index, err)
			}
			// Wait for it to consume before going on: a worker the run
			// stops while it is still starting would die of the SIGTERM
			// before its handler is set, which is not the fault tested.
			if err := w.waitReady(ctx, 60*time.Second); err != nil {
				return err
			}
			h.logf("worker %d started again (pid %d) after %s down", w.index, pid, e.Down.Round(time.Millisecond))
		case restartNATS:
			h.logf("%s: stopping NATS (SIGTERM)", at)
			t := time.Now()
			h.nats.Stop()
			if err := sleepCtx(ctx, e.Down); err != nil {
				return err
			}
			if err := h.nats.Start(ctx); err != nil {
				return fmt.Errorf("starting NATS again: %w", err)
			}
			h.logf("NATS back on the same store after %s", time.Since(t).Round(time.Millisecond))
		case restartPostgres:
			h.logf("%s: stopping Postgres (fast shutdown)", at)
			t := time.Now()
			h.pg.Stop()
			if err := sleepCtx(ctx, e.Down); err != nil {
				return err
			}
			if err := h.pg.Start(ctx); err != nil {
				return fmt.Errorf("starting Postgres again: %w", err)
			}
			h.logf("Postgres back on the same data after %s", time.Since(t).Round(time.Millisecond))
		}
	}
	return nil
}

// drain waits until the consumer holds no message, pending or unacked,
// so redeliveries still on their way are counted; at most two ack waits
// and a bit.
func (h *harness) drain(ctx context.Context) {
	limit := 2*h.cfg.Worker.AckWait + 10*time.Second
	dctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	nc, err := nats.Connect(h.nats.URL(), nats.Name("extractq-chaos"))
	if err != nil {
		h.problem("connecting to NATS to drain: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		h.problem("jetstream: %v", err)
		return
	}
	var last string
	for {
		cons, err := js.Consumer(dctx, h.cfg.NATS.Stream, h.cfg.NATS.Consumer)
		if err == nil {
			var info *jetstream.ConsumerInfo
			if info, err = cons.Info(dctx); err == nil {
				last = fmt.Sprintf("%d pending, %d unacked, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
				if info.NumPending == 0 && info.NumAckPending == 0 {
					h.logf("stream drained: consumer %s has nothing pending or unacked", h.cfg.NATS.Consumer)
					return
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-dctx.Done():
			h.problem("consumer not drained after %s: %s", limit, last)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stopWorkers stops every worker gracefully (SIGTERM); a worker that does
// not end cleanly is a problem.
func (h *harness) stopWorkers() {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	var wg sync.WaitGroup
	for _, w := range h.workers {
		w.down = true
		wg.Go(func() {
			if !w.proc.Stop(syscall.SIGTERM, 45*time.Second) {
				h.problem("worker %d did not stop within 45s of SIGTERM; killed", w.index)
			} else if w.proc.Err() != nil {
				h.problem("worker %d stopped with %s\n%s", w.index, w.proc.ExitStatus(), devstack.Tail(w.logPath, 4))
			}
		})
	}
	wg.Wait()
	h.logf("workers stopped")
}

// report prints what the run did and how the services met the faults,
// before the final line.
func (h *harness) report(v verdict) {
	h.logf("done in %s", time.Since(h.start).Round(100*time.Millisecond))
	kills, starts := 0, 0
	for _, w := range h.workers {
		kills += w.kills
		starts += w.starts
	}
	restarts := func(n int) int { return max(0, n-1) }
	fmt.Fprintf(h.out, "faults: %d worker SIGKILLs (%d worker starts), NATS restarts %d, Postgres restarts %d\n",
		kills, starts, restarts(h.nats.Started), restarts(h.pg.Started))
	fmt.Fprintf(h.out, "runs: %d succeeded, %d repaired, %d failed (triage), %d queued; stored messages %d of %d\n",
		v.ByStatus["succeeded"], v.ByStatus["repaired"], v.ByStatus["failed"], v.ByStatus["queued"], v.Stored, v.Messages)
	if len(v.ByReason) > 0 {
		var rs []string
		for _, l := range sortedCounts(v.ByReason) {
			rs = append(rs, strings.TrimSpace(l))
		}
		fmt.Fprintf(h.out, "triage reasons: %s\n", strings.Join(rs, ", "))
	}
	var logs []string
	for _, w := range h.workers {
		logs = append(logs, w.logPath)
	}
	counts := countLogMessages(logs)
	fmt.Fprintf(h.out, "wasted_calls = %d chat calls the simulator answered - %d recorded in llm_calls (superseded ones included:\n"+
		"  calls of a nak'ed delivery, or of one that found the run committed by another, %d deliveries so): paid calls\n"+
		"  missing from the ledger, cut off by a SIGKILL, a restart or a failed commit before they were written\n",
		v.Served, v.Recorded, counts["info: "+outcomeExistsMsg])
	if v.WastedCalls < 0 {
		h.problem("llm_calls holds %d more calls than the simulator answered", -v.WastedCalls)
	}
	delete(counts, "info: "+outcomeExistsMsg)
	if len(counts) > 0 {
		fmt.Fprintln(h.out, "worker warnings and errors (by message):")
		for _, l := range sortedCounts(counts) {
			fmt.Fprintln(h.out, l)
		}
	}
	if !v.ok() {
		fmt.Fprintf(h.out, "FAIL: lost %d, duplicated %d, unvalidated %d (rerun with -keep -seed %d to keep the logs and data)\n",
			v.Lost, v.Duplicated, v.Unvalidated, h.o.Seed)
	}
	for _, p := range h.problems {
		fmt.Fprintf(h.out, "FAIL: %s\n", firstLine(p))
	}
}

// printLogTails prints the end of every log after a harness failure.
func (h *harness) printLogTails() {
	if h.dir == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(h.dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(h.dir, "*", "*.log"))
	for _, l := range append(logs, more...) {
		fmt.Fprintf(h.out, "--- %s\n%s\n", l, devstack.Tail(l, 10))
	}
}

// cleanup stops everything the harness started and removes its directory
// unless -keep.
func (h *harness) cleanup() {
	h.wmu.Lock()
	var wg sync.WaitGroup
	for _, w := range h.workers {
		w.down = true
		if w.proc != nil {
			wg.Go(func() { w.proc.Stop(syscall.SIGTERM, 10*time.Second) })
		}
	}
	h.wmu.Unlock()
	h.pmu.Lock()
	if ip := h.ingest; ip != nil {
		wg.Go(func() { ip.Stop(syscall.SIGTERM, 5*time.Second) })
	}
	h.pmu.Unlock()
	wg.Wait()
	if h.sim != nil {
		h.sim.close()
	}
	if h.nats != nil {
		h.nats.Stop()
	}
	if h.pool != nil {
		h.pool.Close()
	}
	if h.pg != nil {
		h.pg.Stop()
	}
	if h.dir == "" {
		return
	}
	if h.o.Keep {
		return
	}
	if err := os.RemoveAll(h.dir); err != nil {
		fmt.Fprintf(h.out, "removing %s: %v\n", h.dir, err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
