package main

import (
	"bytes"
	"cmp"
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
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/internal/tcpproxy"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/worker"
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
	// Stops, Cuts and IngestKills count the SIGSTOPs of a worker past the
	// ack wait, the network cuts and the SIGKILLs of ingest mid-file.
	Stops, Cuts, IngestKills int
	// CutFor is how long a link stays cut; 0 means a random 2s to 8s.
	CutFor time.Duration
	// ProviderOutage is how long the simulator refuses every call; 0 means
	// no outage.
	ProviderOutage time.Duration
	// StoreLoss stops NATS, deletes its store and starts it again empty,
	// once, with runs queued.
	StoreLoss bool
	// Window: a fault timed in seconds fires between 1s and Window after
	// ingest started; 0 means messages/100 seconds, at least 10s.
	Window time.Duration
	// Cluster runs NATS as a JetStream cluster of three servers, the
	// stream with three replicas; LeaderKills counts the kills of the
	// stream's leader (each followed by the kill of a second server).
	Cluster     bool
	LeaderKills int
	// Consumers is nats.consumers: shared (default) or per_schema, where
	// the workers (none given -schema) read one consumer per schema.
	Consumers string
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

	pg *devstack.Postgres
	// nodes are the NATS servers: one, or the cluster's three.
	nodes   []*devstack.NATS
	sim     *simulator
	pool    *pgxpool.Pool
	ingest  *devstack.Proc
	workers []*workerProc
	wmu     sync.Mutex // guards each workers[i].proc, swapped by restarts

	// The proxies every link goes through, so that it can be cut: each
	// worker's to NATS and to Postgres, ingest's to each, and the
	// workers' to the simulator (the provider outage). The harness's own
	// connections do not go through them.
	workerNATS []proxySet
	workerPG   []*tcpproxy.Proxy
	ingestNATS proxySet
	ingestPG   *tcpproxy.Proxy
	provider   *tcpproxy.Proxy

	// ingestStart is when the first ingest started: the zero of the
	// faults timed in seconds.
	ingestStart time.Time
	// ingestKilled is set by the kill of ingest, so that its exit is not
	// taken for a failure; ingestDown is how long it then stays down.
	ingestKilled bool
	ingestDown   time.Duration

	// faults counts the faults injected, by what they were.
	faults map[string]int
	fmu    sync.Mutex

	// done and total are the progress: messages whose run has an outcome,
	// and the messages expected (the generated count while ingest runs,
	// then the count stored); stored counts the runs stored.
	done, total, stored atomic.Int64

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
	window := h.o.Window
	if window <= 0 {
		window = max(10*time.Second, time.Duration(h.o.Messages)*time.Second/100)
	}
	evs := planEvents(rand.New(rand.NewPCG(uint64(h.o.Seed), 1)), plan{
		Kills: h.o.Kills, Stops: h.o.Stops, Cuts: h.o.Cuts, IngestKills: h.o.IngestKills, Workers: h.o.Workers,
		NATS: h.o.RestartNATS, Postgres: h.o.RestartPostgres, StoreLoss: h.o.StoreLoss, LeaderKills: h.o.LeaderKills,
		Outage: h.o.ProviderOutage, Window: window, AckWait: h.cfg.Worker.AckWait, CutFor: h.o.CutFor,
	})
	for i, e := range evs {
		if h.o.Outage > 0 && (e.Kind == restartNATS || e.Kind == restartPostgres || e.Kind == loseStore || e.Kind == killNATSLeader) {
			evs[i].Down = h.o.Outage
		}
		h.logf("plan %d/%d: %s at %s, down %s", i+1, len(evs), e.what(), e.when(), evs[i].Down.Round(100*time.Millisecond))
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
	h.ingestStart = time.Now()
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
	h.waitResults(ctx, 90*time.Second)
	h.stopWorkers()
	cctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	h.logf("checking: outcomes, duplicates, results validated again against their schema")
	v, err = checkStore(cctx2, h.pool, h.schemas, h.o.Messages, h.sim.served())
	if err == nil {
		h.logf("checking: the results stream against the outbox, every change published once")
		v.Results, err = h.checkResults(cctx2, h.pool)
	}
	if n := v.ByReason["delivery"]; err == nil && n > 0 {
		h.problem("%d runs sent to triage as kind delivery: no message here is poison, so a fault became human work", n)
	}
	return v, err
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

	ports := make([]int, 3+h.o.Workers+clusterSize-1)
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

	if err := h.startNATS(ctx, append([]int{ports[1]}, ports[3+h.o.Workers:]...)); err != nil {
		return err
	}

	simCfg := h.cfg.Simulator
	simCfg.Seed = h.o.Seed
	if h.sim, err = newSimulator(simCfg, h.o.LatencyMedian, h.o.LatencyP99, h.o.Seed, ports[2]); err != nil {
		return err
	}
	h.logf("LLM simulator on %s: latency median %s, p99 %s; the demo's fault rates", h.sim.ln.Addr(), h.o.LatencyMedian, h.o.LatencyP99)
	if err := h.startProxies(); err != nil {
		return err
	}
	h.logf("proxies: each worker's and ingest's links to NATS and Postgres, and the workers' to the simulator, can be cut")

	for i := range h.o.Workers {
		w := &workerProc{index: i + 1, bin: filepath.Join(h.binDir, "worker"), healthPort: ports[3+i],
			logPath: filepath.Join(h.dir, fmt.Sprintf("worker-%d.log", i+1)), env: h.env(h.workerPG[i], h.workerNATS[i])}
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
nats:
  replicas: %d
  consumers: %s
relay:
  # The reconciler's tick scaled to a run of a minute or two (default 1m):
  # the pass after the stream's store is lost republishes the queued runs
  # at once (it skips reconcile_grace, left at its default), and a tick of
  # a minute would add up to a minute to the run's tail.
  reconcile_every: 5s
results:
  # The results stream, counted by the checks: every change once.
  enabled: true
  publish_every: 200ms
simulator:
  seed: %d
`, h.o.Concurrency, h.o.AckWait, h.o.MaxDeliver, max(h.o.AckWait/3, 100*time.Millisecond), h.replicas(), cmp.Or(h.o.Consumers, config.ConsumersShared), h.o.Seed)
	if err := os.WriteFile(h.cfgPath, []byte(body), 0o644); err != nil {
		return err
	}
	cfg, err := startup.LoadConfig(h.cfgPath, startup.Env{})
	if err != nil {
		return err
	}
	h.cfg = cfg
	entries, err := worker.LoadSchemas(cfg)
	if err != nil {
		return err
	}
	h.schemas = map[string]*pipeline.Schema{}
	for id, e := range entries {
		h.schemas[id] = e.Schema
	}
	return nil
}

// replicas is the runs stream's nats.replicas: 3 on the cluster.
func (h *harness) replicas() int {
	if h.o.Cluster {
		return clusterSize
	}
	return 1
}

// startProxies starts the proxy of every link that can be cut.
func (h *harness) startProxies() error {
	start := func(target string) (*tcpproxy.Proxy, error) { return tcpproxy.Listen(target) }
	var err error
	pgAddr := devstack.Addr(h.pg.Port)
	natsSet := func() (proxySet, error) {
		var set proxySet
		for _, n := range h.nodes {
			p, err := start(devstack.Addr(n.Port))
			if err != nil {
				return set, err
			}
			set = append(set, p)
		}
		return set, nil
	}
	for range h.o.Workers {
		n, err := natsSet()
		h.workerNATS = append(h.workerNATS, n)
		if err != nil {
			return err
		}
		var p *tcpproxy.Proxy
		if p, err = start(pgAddr); err != nil {
			return err
		}
		h.workerPG = append(h.workerPG, p)
	}
	if h.ingestNATS, err = natsSet(); err != nil {
		return err
	}
	if h.ingestPG, err = start(pgAddr); err != nil {
		return err
	}
	h.provider, err = start(h.sim.ln.Addr().String())
	return err
}

// proxies returns every proxy started.
func (h *harness) proxies() []*tcpproxy.Proxy {
	ps := append([]*tcpproxy.Proxy{}, h.workerPG...)
	for _, set := range h.workerNATS {
		ps = append(ps, set...)
	}
	ps = append(ps, h.ingestNATS...)
	for _, p := range []*tcpproxy.Proxy{h.ingestPG, h.provider} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// env is the environment of every command the harness starts: the private
// services, reached through the proxies pg and nats and the provider's,
// and the run's configuration, nothing inherited.
func (h *harness) env(pg *tcpproxy.Proxy, nats proxySet) []string {
	return []string{
		"DATABASE_URL=" + fmt.Sprintf("postgres://postgres@%s/extractq?sslmode=disable", pg.Addr()),
		"NATS_URL=" + nats.url(),
		"LLM_BASE_URL=http://" + h.provider.Addr() + "/v1",
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
// still cover every message. An ingest the harness killed (killIngest) is
// run again on the same file too, and that is no problem.
func (h *harness) runIngest(ctx context.Context, path string) {
	for attempt := 0; ; {
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
		h.pmu.Lock()
		killed, down := h.ingestKilled, h.ingestDown
		h.ingestKilled = false
		h.pmu.Unlock()
		if killed {
			if sleepCtx(ctx, down) != nil {
				return
			}
			h.logf("ingest: running it again on the same file after its SIGKILL (%d stored so far)", h.stored.Load())
			continue
		}
		if h.ingestFinished(p, stdout.Bytes()) || attempt >= h.o.IngestRetries {
			return
		}
		attempt++
		h.logf("ingest: running it again on the same file in 5s (%d of %d)", attempt, h.o.IngestRetries)
		if sleepCtx(ctx, 5*time.Second) != nil {
			return
		}
	}
}

// startIngest starts cmd/ingest -json on the messages, its report going
// to stdout and its logs to ingest.log.
func (h *harness) startIngest(path string, stdout *bytes.Buffer) (*devstack.Proc, error) {
	return devstack.Start(devstack.Spec{Name: "ingest", LogPath: filepath.Join(h.dir, "ingest.log"), Env: h.env(h.ingestPG, h.ingestNATS), Stdout: stdout,
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
			h.stored.Store(stored)
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

// chaos injects the planned faults, each once its trigger is reached.
// Each waits in its own goroutine. Faults on one target (a worker, ingest,
// NATS, Postgres, the provider) are injected one at a time; faults on
// different targets may overlap, so that a long one (a SIGSTOP, the
// provider outage) does not push the others past the end of the work. It
// returns the first error: a service that cannot be brought back.
func (h *harness) chaos(ctx context.Context, evs []event) error {
	locks := map[string]*sync.Mutex{}
	for _, e := range evs {
		if locks[e.target()] == nil {
			locks[e.target()] = new(sync.Mutex)
		}
	}
	errs := make(chan error, len(evs))
	var wg sync.WaitGroup
	for i, e := range evs {
		wg.Go(func() {
			if err := h.waitTrigger(ctx, e); err != nil {
				errs <- err
				return
			}
			mu := locks[e.target()]
			mu.Lock()
			defer mu.Unlock()
			if err := sleepCtx(ctx, e.Delay); err != nil {
				errs <- err
				return
			}
			at := fmt.Sprintf("fault %d/%d at %d/%d done, %d stored, %.1fs after ingest started",
				i+1, len(evs), h.done.Load(), h.total.Load(), h.stored.Load(), time.Since(h.ingestStart).Seconds())
			errs <- h.inject(ctx, at, e)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitTrigger waits until e's moment of the run.
func (h *harness) waitTrigger(ctx context.Context, e event) error {
	reached := func() bool {
		switch e.Trigger {
		case bySeconds:
			return time.Since(h.ingestStart) >= e.After
		case byStored:
			return float64(h.stored.Load()) >= e.At*float64(h.o.Messages)
		}
		return float64(h.done.Load()) >= e.At*float64(h.total.Load())
	}
	for !reached() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// count records one fault injected, by what it was.
func (h *harness) count(what string) {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	if h.faults == nil {
		h.faults = map[string]int{}
	}
	h.faults[what]++
}

// inject injects one fault and brings back what it took down.
func (h *harness) inject(ctx context.Context, at string, e event) error {
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
		h.count("worker SIGKILL")
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
		// Wait for it to consume before going on with this worker's
		// faults. It may take a while when another fault overlaps (NATS
		// or Postgres down, the provider outage pausing work).
		if err := w.waitReady(ctx, 2*time.Minute); err != nil {
			if ctx.Err() != nil {
				return err
			}
			h.problem("worker %d not ready after its restart: %v", w.index, err)
			return nil
		}
		h.logf("worker %d started again (pid %d) after %s down", w.index, pid, e.Down.Round(time.Millisecond))
	case stopWorker:
		w := h.workers[e.Worker]
		h.wmu.Lock()
		p := w.proc
		w.stopped = true
		h.wmu.Unlock()
		h.logf("%s: SIGSTOP worker %d (pid %d) for %s, past the ack wait of %s", at, w.index, p.Pid(),
			e.Down.Round(time.Millisecond), h.cfg.Worker.AckWait)
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP worker %d: %w", w.index, err)
		}
		h.count("worker SIGSTOP past the ack wait")
		serr := sleepCtx(ctx, e.Down)
		err := p.Signal(syscall.SIGCONT)
		h.wmu.Lock()
		w.stopped = false
		h.wmu.Unlock()
		if serr != nil {
			return serr
		}
		if err != nil {
			return fmt.Errorf("SIGCONT worker %d: %w", w.index, err)
		}
		h.logf("worker %d continued (SIGCONT)", w.index)
	case cutLink:
		var p cutter
		what := e.Link.String()
		switch e.Link {
		case workerNATS:
			p, what = h.workerNATS[e.Worker], fmt.Sprintf("worker %d↔NATS", e.Worker+1)
		case workerPostgres:
			p, what = h.workerPG[e.Worker], fmt.Sprintf("worker %d↔Postgres", e.Worker+1)
		case ingestNATS:
			p = h.ingestNATS
		case ingestPostgres:
			p = h.ingestPG
		}
		n := p.Cut()
		h.logf("%s: cut %s for %s (%d open connections reset)", at, what, e.Down.Round(time.Millisecond), n)
		h.count("cut " + e.Link.String())
		err := sleepCtx(ctx, e.Down)
		p.Restore()
		if err != nil {
			return err
		}
		h.logf("%s restored; %d connections refused while cut", what, p.Refused())
	case killIngest:
		h.pmu.Lock()
		p := h.ingest
		running := p != nil && !p.Exited()
		if running {
			h.ingestKilled, h.ingestDown = true, e.Down
		}
		h.pmu.Unlock()
		if !running {
			if p != nil {
				// The file was in before the fault came due: another fault
				// on ingest (a cut) held this one back past ingest's end.
				// Nothing of the product's is at fault; the log says so.
				h.logf("%s: SIGKILL ingest skipped: ingest had already finished the file", at)
				h.count("ingest SIGKILL skipped (ingest done)")
				return nil
			}
			h.problem("%s: ingest was not running when it was to be killed mid-file", at)
			return nil
		}
		h.logf("%s: SIGKILL ingest (pid %d) mid-file; it runs again on the same file after %s", at, p.Pid(), e.Down.Round(time.Millisecond))
		p.Kill()
		h.count("ingest SIGKILL mid-file")
	case providerOutage:
		n := h.provider.Cut()
		h.logf("%s: provider outage: the simulator refuses every call for %s (%d calls cut; breaker cooldown %s)",
			at, e.Down.Round(time.Millisecond), n, h.cfg.Provider.BreakerCooldown)
		h.count("provider outage")
		err := sleepCtx(ctx, e.Down)
		h.provider.Restore()
		if err != nil {
			return err
		}
		back, done := time.Now(), h.done.Load()
		h.logf("provider back after %s", e.Down.Round(time.Millisecond))
		limit := h.cfg.Provider.BreakerCooldown + 10*time.Second
		for h.done.Load() == done && h.done.Load() < h.total.Load() && time.Since(back) < 2*limit {
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		switch took := time.Since(back); {
		case h.done.Load() > done:
			h.logf("work resumed %s after the provider came back (within the breaker cooldown plus 10s: %v)",
				took.Round(100*time.Millisecond), took <= limit)
		case h.done.Load() < h.total.Load():
			h.problem("work did not resume within %s of the provider coming back", took.Round(time.Second))
		}
	case restartNATS:
		// One server; on the cluster, one drawn from the seed.
		n := h.nodes[int(h.o.Seed%int64(len(h.nodes)))]
		what := "NATS"
		if h.o.Cluster {
			what = "NATS server " + n.Name
		}
		h.logf("%s: stopping %s (SIGTERM)", at, what)
		t := time.Now()
		n.Stop()
		h.count("NATS restart")
		if err := sleepCtx(ctx, e.Down); err != nil {
			return err
		}
		if err := n.Start(ctx); err != nil {
			return fmt.Errorf("starting %s again: %w", what, err)
		}
		h.logf("%s back on the same store after %s", what, time.Since(t).Round(time.Millisecond))
	case killNATSLeader:
		return h.killLeader(ctx, at, e)
	case restartPostgres:
		h.logf("%s: stopping Postgres (fast shutdown)", at)
		t := time.Now()
		h.pg.Stop()
		h.count("Postgres restart")
		if err := sleepCtx(ctx, e.Down); err != nil {
			return err
		}
		if err := h.pg.Start(ctx); err != nil {
			return fmt.Errorf("starting Postgres again: %w", err)
		}
		h.logf("Postgres back on the same data after %s", time.Since(t).Round(time.Millisecond))
	case loseStore:
		queued := h.stored.Load() - h.done.Load()
		h.logf("%s: stopping NATS and deleting its store, %d runs queued in Postgres", at, queued)
		t := time.Now()
		n := h.nodes[0]
		n.Stop()
		if err := os.RemoveAll(filepath.Join(n.Dir, "store")); err != nil {
			return fmt.Errorf("deleting the NATS store: %w", err)
		}
		h.count("stream store lost")
		if err := sleepCtx(ctx, e.Down); err != nil {
			return err
		}
		if err := n.Start(ctx); err != nil {
			return fmt.Errorf("starting NATS again: %w", err)
		}
		h.logf("NATS back with an empty store after %s: the runs queued in Postgres must be republished", time.Since(t).Round(time.Millisecond))
	}
	return nil
}

// drain waits until the workers' consumers (every one of nats.consumers'
// mode) hold no message, pending or unacked, so redeliveries still on
// their way are counted; at most two ack waits and a bit.
func (h *harness) drain(ctx context.Context) {
	limit := 2*h.cfg.Worker.AckWait + 10*time.Second
	dctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	nc, err := nats.Connect(h.natsURL(), nats.Name("extractq-chaos"))
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
		drained := 0
		specs := h.cfg.Consumers()
		for _, spec := range specs {
			cons, err := js.Consumer(dctx, h.cfg.NATS.Stream, spec.Name)
			if err == nil {
				var info *jetstream.ConsumerInfo
				if info, err = cons.Info(dctx); err == nil {
					last = fmt.Sprintf("consumer %s: %d pending, %d unacked, %d redelivered", spec.Name, info.NumPending, info.NumAckPending, info.NumRedelivered)
					if info.NumPending == 0 && info.NumAckPending == 0 {
						drained++
						continue
					}
				}
			}
			if err != nil {
				last = fmt.Sprintf("consumer %s: %v", spec.Name, err)
			}
			break
		}
		if drained == len(specs) {
			h.logf("stream drained: consumers %s have nothing pending or unacked", consumerNames(specs))
			return
		}
		select {
		case <-dctx.Done():
			h.problem("consumers not drained after %s: %s", limit, last)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// consumerNames lists specs' names, comma-separated.
func consumerNames(specs []config.ConsumerSpec) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
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
	fmt.Fprintf(h.out, "faults: %d worker SIGKILLs (%d worker starts)", kills, starts)
	h.fmu.Lock()
	for _, l := range sortedCounts(h.faults) {
		fmt.Fprintf(h.out, ", %s", strings.TrimSpace(l))
	}
	h.fmu.Unlock()
	fmt.Fprintln(h.out)
	fmt.Fprintf(h.out, "runs: %d succeeded, %d repaired, %d held (review), %d failed (triage), %d queued; stored messages %d of %d\n",
		v.ByStatus["succeeded"], v.ByStatus["repaired"], v.ByStatus["held"], v.ByStatus["failed"], v.ByStatus["queued"], v.Stored, v.Messages)
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
		"  calls of a delivery put back, or of one that found the run committed by another, %d deliveries so): paid calls\n"+
		"  missing from the ledger, cut off by a SIGKILL (or answered to a frozen worker past their deadline) before they were written\n",
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
	fmt.Fprintln(h.out, v.Results.line())
	if !v.ok() {
		fmt.Fprintf(h.out, "FAIL: lost %d, duplicated %d, unvalidated %d, results stream ok %t (rerun with -keep -seed %d to keep the logs and data)\n",
			v.Lost, v.Duplicated, v.Unvalidated, v.Results.ok(), h.o.Seed)
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
			if w.stopped {
				w.proc.Signal(syscall.SIGCONT)
			}
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
	for _, p := range h.proxies() {
		p.Close()
	}
	if h.sim != nil {
		h.sim.close()
	}
	for _, n := range h.nodes {
		n.Stop()
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
