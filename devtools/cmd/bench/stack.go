package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/internal/devstack"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// stack is one scenario's private pipeline on the shared services: its own
// Postgres schema, stream, simulator and worker processes.
type stack struct {
	env     benchEnv
	name    string
	dir     string // scenario's folder: config, logs
	dbURL   string // with search_path
	st      *store.Store
	nats    config.NATS
	js      jetstream.JetStream
	cfgPath string
	simAddr string
	procs   []*devstack.Proc
	log     *zap.Logger
}

// benchEnv is what every scenario shares.
type benchEnv struct {
	bin      string // folder with worker and llmsim binaries
	baseDB   string // DATABASE_URL of the bench database
	natsURL  string
	messages []ingestLine // the real sample
	out      string       // results folder
	profile  bool         // processes write CPU profiles beside their logs
	log      *zap.Logger
	// svc are the private Postgres and NATS, nil with -shared.
	svc *services
	// baselineBin is the worker of baselineRev (-baseline), or empty.
	baselineBin, baselineRev string
	// workerEnv is added to every worker's environment (-worker-env).
	workerEnv []string
}

type ingestLine struct{ ID, Text string }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newStack makes the scenario's schema, migrated, and its stream names,
// and writes its configuration file from yaml (overrides of the defaults).
func newStack(ctx context.Context, env benchEnv, name, yaml string) (*stack, error) {
	sfx := randomHex(4)
	ident := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	s := &stack{env: env, name: name, log: env.log.With(zap.String("scenario", name))}
	s.dir = filepath.Join(env.out, "scenario-"+name)
	// The folder holds this run's files only: logs are appended to.
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	schema := "bench_" + ident + "_" + sfx
	u, err := url.Parse(env.baseDB)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	s.dbURL = u.String()
	admin, err := store.Open(ctx, env.baseDB, zap.NewNop())
	if err != nil {
		return nil, err
	}
	_, err = admin.Pool.Exec(ctx, "CREATE SCHEMA "+schema)
	admin.Close()
	if err != nil {
		return nil, err
	}
	if s.st, err = store.Open(ctx, s.dbURL, zap.NewNop()); err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, s.st.Pool, zap.NewNop()); err != nil {
		return nil, err
	}
	s.nats = config.NATS{Stream: "BENCH_" + strings.ToUpper(ident+"_"+sfx), SubjectPrefix: "bench_" + ident + "_" + sfx,
		Consumer: "workers", DuplicateWindow: 2 * time.Minute}
	simPort, err := devstack.FreePort()
	if err != nil {
		return nil, err
	}
	s.simAddr = devstack.Addr(simPort)
	full := fmt.Sprintf("nats:\n  stream: %s\n  subject_prefix: %s\n  consumer: workers\n%s\nsimulator:\n  addr: %s\n%s",
		s.nats.Stream, s.nats.SubjectPrefix, section(yaml, "worker"), s.simAddr, indentSimulator(yaml))
	full += dropSections(yaml, "worker", "simulator")
	s.cfgPath = filepath.Join(s.dir, "config.yaml")
	if err := os.WriteFile(s.cfgPath, []byte(full), 0o644); err != nil {
		return nil, err
	}
	if _, err := config.Load(s.cfgPath); err != nil {
		return nil, fmt.Errorf("scenario %s config: %w", name, err)
	}
	_, js, err := queue.Connect(ctx, env.natsURL, "extractq-bench", zap.NewNop())
	if err != nil {
		return nil, err
	}
	s.js = js
	if _, err := queue.EnsureStream(ctx, js, s.nats); err != nil {
		return nil, err
	}
	return s, nil
}

// section returns the YAML block "name:" of doc with its indented lines.
func section(doc, name string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(l, name+":"):
			in = true
		case in && (strings.HasPrefix(l, " ") || l == ""):
		default:
			in = false
		}
		if in {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// indentSimulator returns the lines under "simulator:" of doc.
func indentSimulator(doc string) string {
	sec := section(doc, "simulator")
	if i := strings.IndexByte(sec, '\n'); i >= 0 {
		return sec[i+1:]
	}
	return ""
}

// dropSections returns doc without the named top-level sections.
func dropSections(doc string, names ...string) string {
	var b strings.Builder
	skip := false
	for _, l := range strings.Split(doc, "\n") {
		if l != "" && !strings.HasPrefix(l, " ") {
			skip = false
			for _, n := range names {
				if strings.HasPrefix(l, n+":") {
					skip = true
				}
			}
		}
		if !skip && l != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// close stops the processes, deletes the stream and drops the schema.
func (s *stack) close() {
	for _, p := range s.procs {
		p.Stop(syscall.SIGTERM, 10*time.Second)
		fmt.Fprintf(os.Stderr, "bench: %s/%s used %.1fs CPU\n", s.name, p.Name(), p.CPUTime().Seconds())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.js.DeleteStream(ctx, s.nats.Stream)
	_ = s.js.DeleteStream(ctx, queue.DeadLetterStreamName(s.nats))
	if s.st != nil {
		s.st.Close()
	}
	if admin, err := store.Open(ctx, s.env.baseDB, zap.NewNop()); err == nil {
		u, _ := url.Parse(s.dbURL)
		_, _ = admin.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+u.Query().Get("search_path")+" CASCADE")
		admin.Close()
	}
}

// load records and publishes n messages (the real sample, repeated with
// new ids) by the bulk path (bulkLoad), keeping the schema's search
// index, and returns the batch id. Every scenario loads before its
// workers start, so how the backlog got there does not count in its
// figures; ingest's line-by-line path took a fifth of the full bench's
// time (docs/benchmarks.md, "Where the full run's time goes").
func (s *stack) load(ctx context.Context, n int) (string, error) {
	start := time.Now()
	batch, err := s.bulkLoad(ctx, n, false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "bench: %s: loaded %d messages in %s\n", s.name, n, time.Since(start).Round(100*time.Millisecond))
	return batch, nil
}

// start starts bin with args as the scenario's process name, on the
// scenario's database, stream, configuration and simulator, logging to
// <name>.log in the scenario's folder.
func (s *stack) start(name, bin string, args []string, env ...string) (*devstack.Proc, error) {
	if s.env.profile {
		args = append(args, "-cpuprofile", filepath.Join(s.dir, name+".cpu.pprof"))
	}
	env = append([]string{"DATABASE_URL=" + s.dbURL, "NATS_URL=" + s.env.natsURL, "CONFIG=" + s.cfgPath,
		"LLM_BASE_URL=http://" + s.simAddr + "/v1", "LLM_API_KEY=bench", "LOG_LEVEL=warn"}, env...)
	p, err := devstack.Start(devstack.Spec{Name: name, LogPath: filepath.Join(s.dir, name+".log"), Env: env,
		Args: append([]string{bin}, args...)})
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// startSim starts the simulator and waits for it to answer.
func (s *stack) startSim(ctx context.Context) error {
	p, err := s.start("llmsim", filepath.Join(s.env.bin, "llmsim"), []string{"-config", s.cfgPath})
	if err != nil {
		return err
	}
	if err := devstack.WaitHTTP(ctx, "http://"+s.simAddr+"/healthz", p, 15*time.Second); err != nil {
		return fmt.Errorf("scenario %s: simulator: %w", s.name, err)
	}
	return nil
}

func (s *stack) startWorker(name string) (*devstack.Proc, error) {
	return s.start(name, filepath.Join(s.env.bin, "worker"), []string{"-health-addr", ""}, s.env.workerEnv...)
}

// startWorkerProfiled is startWorker, except that under -profile the
// worker serves pprof on a free local port, returned (else "").
func (s *stack) startWorkerProfiled(name string) (*devstack.Proc, string, error) {
	if !s.env.profile {
		p, err := s.startWorker(name)
		return p, "", err
	}
	port, err := devstack.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := devstack.Addr(port)
	p, err := s.start(name, filepath.Join(s.env.bin, "worker"), []string{"-health-addr", addr, "-pprof"}, s.env.workerEnv...)
	return p, addr, err
}

// progress is where the runs of a batch stand.
type progress struct {
	Total, Done, Failed int
	First, Last         time.Time // first and last finished_at
	P10, P90            time.Time // when 10% and 90% of the runs had finished
}

func (s *stack) progress(ctx context.Context, batch string) (progress, error) {
	return progressOn(ctx, s.st.Pool, batch)
}

// progressOn is progress with the query on q.
func progressOn(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, batch string) (progress, error) {
	var p progress
	var first, last, p10, p90 *time.Time
	err := q.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 'queued'),
		count(*) FILTER (WHERE status = 'failed'), min(finished_at), max(finished_at),
		percentile_disc(0.1) WITHIN GROUP (ORDER BY finished_at), percentile_disc(0.9) WITHIN GROUP (ORDER BY finished_at)
		FROM runs WHERE batch_id = $1`, batch).
		Scan(&p.Total, &p.Done, &p.Failed, &first, &last, &p10, &p90)
	if first != nil {
		p.First, p.Last, p.P10, p.P90 = *first, *last, *p10, *p90
	}
	return p, err
}

// waitDone polls until every run of the batch has an outcome. The polls
// ask only whether a run is still queued (runs_batch_id_idx; a count of
// the queued ones took 9 ms a poll at 2,048 in flight); the
// whole progress, a scan and two sorts of the batch's runs, is read once
// at the end: polled every 200 ms it took Postgres CPU from the run being
// measured (at 2,048 in flight, 16,192 runs a poll).
func (s *stack) waitDone(ctx context.Context, batch string, timeout time.Duration) (progress, error) {
	deadline := time.Now().Add(timeout)
	for {
		var queued bool
		if err := s.st.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM runs WHERE batch_id = $1 AND status = 'queued')`, batch).Scan(&queued); err != nil {
			return progress{}, err
		}
		if !queued {
			return s.progress(ctx, batch)
		}
		if time.Now().After(deadline) {
			p, err := s.progress(ctx, batch)
			if err != nil {
				return p, err
			}
			return p, fmt.Errorf("scenario %s: %d of %d runs done after %v", s.name, p.Done, p.Total, timeout)
		}
		select {
		case <-ctx.Done():
			return progress{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// work counts what every run of the stack took: chat calls recorded
// (llm_calls) and runs repaired (progress has the failed ones), for a
// stack of one batch, after its drain.
func (s *stack) work(ctx context.Context) (calls, repaired int, err error) {
	err = s.st.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM llm_calls),
		(SELECT count(*) FROM runs WHERE status = 'repaired')`).Scan(&calls, &repaired)
	return calls, repaired, err
}

// throughput is runs per second in the steady state: between the moments
// 10% and 90% of the runs had finished, so the ramp-up and the last
// stragglers (the slow tail of the latency) do not count.
func (p progress) throughput() float64 {
	span := p.P90.Sub(p.P10).Seconds()
	if span <= 0 || p.Done < 10 {
		return 0
	}
	return 0.8 * float64(p.Done) / span
}

// perSecond returns the outcomes of the batch in one-second buckets from
// the first outcome.
func (s *stack) perSecond(ctx context.Context, batch string) ([]int, error) {
	rows, err := s.st.Pool.Query(ctx, `SELECT floor(extract(epoch FROM finished_at - min(finished_at) OVER ()))::int AS sec
		FROM runs WHERE batch_id = $1 AND finished_at IS NOT NULL`, batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var sec int
		if err := rows.Scan(&sec); err != nil {
			return nil, err
		}
		for len(out) <= sec {
			out = append(out, 0)
		}
		out[sec]++
	}
	return out, rows.Err()
}
