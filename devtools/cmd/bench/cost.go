package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/extractq/extractq/devtools/internal/devstack"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
)

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on Linux for every architecture the bench runs on).
const clockTicks = 100

// procStat is what the bench reads of /proc/<pid>/stat: the parent, and
// the CPU time (user + system) the process used and that of the children
// it waited for.
type procStat struct {
	ppid       int
	self, kids time.Duration
	sys        time.Duration // the system-time part of self
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces: the fields start
	// after its last ')'. Then: state ppid ... utime(14) stime cutime cstime.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTicks
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, self: n(11) + n(12), kids: n(13) + n(14), sys: n(12)}, nil
}

// procUsage is what a process used: CPU time (user + system), the
// system part, and its read- and write-family system calls (syscr and
// syscw of /proc/<pid>/io: read, readv, pread and write, writev, pwrite,
// sockets included; proc(5)). The calls are counts, not timings: the
// same in a run on a loaded machine as on a quiet one.
type procUsage struct {
	cpu, sys      time.Duration
	reads, writes int64
}

func (u procUsage) add(v procUsage) procUsage {
	return procUsage{cpu: u.cpu + v.cpu, sys: u.sys + v.sys, reads: u.reads + v.reads, writes: u.writes + v.writes}
}

// processUsage is what process pid has used so far; the calls are 0
// when /proc/<pid>/io cannot be read.
func processUsage(pid int) procUsage {
	st, _ := readProcStat(pid)
	u := procUsage{cpu: st.self, sys: st.sys}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return u
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			u.reads = n
		case "syscw":
			u.writes = n
		}
	}
	return u
}

// processCPU is the CPU time process pid has used so far.
func processCPU(pid int) time.Duration {
	st, _ := readProcStat(pid)
	return st.self
}

// treeCPU is the CPU time of process pid, of the children it reaped, and
// of its live descendants: a Postgres server's postmaster, its backends
// (a backend's time moves to the postmaster's children's time as it
// exits) and its background processes.
func treeCPU(pid int) time.Duration {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	stats := map[int]procStat{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(p); err == nil {
			stats[p] = st
			children[st.ppid] = append(children[st.ppid], p)
		}
	}
	var total time.Duration
	var walk func(int)
	walk = func(p int) {
		st := stats[p]
		total += st.self + st.kids
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return total
}

// services are the bench's private Postgres and NATS server, so that
// their CPU time is the bench's own.
type services struct {
	pg       *devstack.Postgres
	nats     *devstack.NATS
	natsHTTP string // monitoring address
}

func (s *services) stop() {
	if s.nats != nil {
		s.nats.Stop()
	}
	if s.pg != nil {
		s.pg.Stop()
	}
}

// startServices starts a private Postgres cluster (initdb in dir/pg) and
// a private NATS server (natsd from bin, in dir/nats, monitoring on).
// With statements, Postgres loads pg_stat_statements (scenario R then
// writes what each statement cost, pg-statements.txt).
func startServices(ctx context.Context, bin, dir, pgBin string, statements bool) (*services, error) {
	s := &services{}
	ports := make([]int, 3)
	for i := range ports {
		p, err := devstack.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	pgDir, err := devstack.FindPGBin(pgBin)
	if err != nil {
		return nil, err
	}
	_ = os.RemoveAll(filepath.Join(dir, "pg"))
	_ = os.RemoveAll(filepath.Join(dir, "nats"))
	if s.pg, err = devstack.NewPostgres(ctx, pgDir, filepath.Join(dir, "pg"), ports[0]); err != nil {
		return nil, err
	}
	if statements {
		s.pg.Settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all", "pg_stat_statements.track_planning=on"}
	}
	if err := s.pg.Start(ctx); err != nil {
		return nil, fmt.Errorf("private Postgres: %w\n%s", err, devstack.Tail(s.pg.LogPath(), 20))
	}
	s.nats = &devstack.NATS{Bin: filepath.Join(bin, "natsd"), Dir: filepath.Join(dir, "nats"), Port: ports[1], HTTPPort: ports[2]}
	if err := s.nats.Start(ctx); err != nil {
		s.stop()
		return nil, fmt.Errorf("private NATS: %w", err)
	}
	s.natsHTTP = devstack.Addr(ports[2])
	return s, nil
}

// buildBaseline builds cmd/worker of git revision rev of repo into
// out/baseline-<rev>/worker: the revision's tree is exported with git
// archive into a temporary folder and built there.
func buildBaseline(ctx context.Context, repo, out, rev string) (string, error) {
	sha, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("baseline %q: not a commit of the repository: %w", rev, err)
	}
	short := strings.TrimSpace(string(sha))
	src, err := os.MkdirTemp("", "extractq-baseline-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := exec.CommandContext(ctx, "git", "-C", repo, "archive", short)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %w", short, err)
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("untar %s: %w", short, err)
	}
	dir := filepath.Join(out, "baseline-"+short)
	if err := devstack.Build(ctx, src, dir, "./cmd/worker"); err != nil {
		return "", fmt.Errorf("baseline %s: %w", short, err)
	}
	return filepath.Join(dir, "worker"), nil
}

// schemaWithoutRules writes the bundled customer_message schema without
// its x-rules to path: the rules change the calls per message under the
// simulator, and a commit without them would not be compared like with
// like.
func schemaWithoutRules(path string) error {
	b, err := schemas.FS.ReadFile("customer_message.v1.json")
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	var strip func(any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			delete(v, "x-rules")
			for _, x := range v {
				strip(x)
			}
		case []any:
			for _, x := range v {
				strip(x)
			}
		}
	}
	strip(doc)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// costFigures are one worker's figures in scenario R, per message.
type costFigures struct {
	Throughput float64 // msg/s, 10% to 90% of the runs
	WorkerUS   float64 // CPU µs per message of each process
	SimUS      float64
	NATSUS     float64
	PGUS       float64
	ProductUS  float64 // worker + NATS + Postgres
	TxPerMsg   float64 // Postgres transactions committed
	SubsPerMsg float64 // NATS subscriptions the worker made
	CallsPer   float64 // provider calls per message
	RSSMB      float64 // the worker's at the end
}

func (c costFigures) add(o costFigures, w float64) costFigures {
	c.Throughput += w * o.Throughput
	c.WorkerUS += w * o.WorkerUS
	c.SimUS += w * o.SimUS
	c.NATSUS += w * o.NATSUS
	c.PGUS += w * o.PGUS
	c.ProductUS += w * o.ProductUS
	c.TxPerMsg += w * o.TxPerMsg
	c.SubsPerMsg += w * o.SubsPerMsg
	c.CallsPer += w * o.CallsPer
	c.RSSMB += w * o.RSSMB
	return c
}

func (c costFigures) extra(prefix string, m map[string]float64) {
	m[prefix+"msg_per_s"] = c.Throughput
	m[prefix+"worker_cpu_us_per_msg"] = c.WorkerUS
	m[prefix+"sim_cpu_us_per_msg"] = c.SimUS
	m[prefix+"nats_cpu_us_per_msg"] = c.NATSUS
	m[prefix+"pg_cpu_us_per_msg"] = c.PGUS
	m[prefix+"product_cpu_us_per_msg"] = c.ProductUS
	m[prefix+"pg_tx_per_msg"] = c.TxPerMsg
	m[prefix+"nats_subs_per_msg"] = c.SubsPerMsg
	m[prefix+"calls_per_msg"] = c.CallsPer
	m[prefix+"worker_rss_mb"] = c.RSSMB
}

// scenarioR measures what a message costs the product at a real model's
// speed: 256 in flight, log-normal latency (median 800 ms, p99 5 s), the
// customer_message schema without its x-rules. Per message: the CPU time
// of the worker, the NATS server and Postgres (the product), and of the
// simulator apart; Postgres transactions committed; NATS subscriptions
// the worker made. With a baseline worker, the two run in alternation,
// rounds times each (baseline, new; then new, baseline; ...), so that
// every "before" figure comes from the same run.
func scenarioR(ctx context.Context, env benchEnv, n, rounds int) ([]result, error) {
	if env.svc == nil {
		return nil, errors.New("scenario R needs the private services (run without -shared)")
	}
	schemaPath := filepath.Join(env.out, "customer_message.norules.json")
	if err := schemaWithoutRules(schemaPath); err != nil {
		return nil, err
	}
	type variant struct{ name, bin string }
	vs := []variant{{"new", filepath.Join(env.bin, "worker")}}
	if env.baselineBin != "" {
		vs = append([]variant{{"baseline", env.baselineBin}}, vs...)
	}
	sum := map[string]costFigures{}
	for i := range rounds {
		order := vs
		if i%2 == 1 && len(vs) == 2 {
			order = []variant{vs[1], vs[0]}
		}
		for _, v := range order {
			f, err := costRun(ctx, env, fmt.Sprintf("r-%s-%d", v.name, i+1), v.bin, n, schemaPath)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(os.Stderr, "bench: R %s round %d: %.0f msg/s, product %.0f µs/msg (worker %.0f, NATS %.0f, Postgres %.0f; simulator %.0f), %.3f tx/msg, %.3f subs/msg\n",
				v.name, i+1, f.Throughput, f.ProductUS, f.WorkerUS, f.NATSUS, f.PGUS, f.SimUS, f.TxPerMsg, f.SubsPerMsg)
			sum[v.name] = sum[v.name].add(f, 1/float64(rounds))
		}
	}
	nw, base := sum["new"], sum["baseline"]
	extra := map[string]float64{"messages": float64(n), "rounds": float64(rounds)}
	nw.extra("new_", extra)
	if env.baselineBin != "" {
		base.extra("baseline_", extra)
	}
	name := "cost at 256 in flight, log-normal 800ms/5s, no x-rules: product CPU"
	cpu := result{Scenario: "R", Name: name + " (worker+NATS+Postgres), new vs baseline " + env.baselineRev, Unit: "µs/msg",
		Measured: nw.ProductUS, Limit: base.ProductUS, Goal: "<= 0.50", Extra: extra}
	cpu.Ratio = ratio(cpu.Measured, cpu.Limit)
	cpu.Pass = env.baselineBin == "" || cpu.Ratio <= 0.5
	if env.baselineBin == "" {
		cpu.Name, cpu.Goal = name+" (worker+NATS+Postgres)", "report"
	}
	tx := result{Scenario: "R", Name: "cost: Postgres transactions per message", Unit: "tx/msg",
		Measured: nw.TxPerMsg, Limit: 0.2, Goal: "<= 0.2", Pass: nw.TxPerMsg <= 0.2,
		Extra: map[string]float64{"baseline_pg_tx_per_msg": base.TxPerMsg}}
	tx.Ratio = ratio(tx.Measured, tx.Limit)
	subs := result{Scenario: "R", Name: "cost: NATS subscriptions per message", Unit: "subs/msg",
		Measured: nw.SubsPerMsg, Limit: 0.01, Goal: "about 0 (<= 0.01)", Pass: nw.SubsPerMsg <= 0.01,
		Extra: map[string]float64{"baseline_nats_subs_per_msg": base.SubsPerMsg}}
	subs.Ratio = ratio(subs.Measured, subs.Limit)
	return []result{cpu, tx, subs}, nil
}

// costRun drains n messages with the worker binary bin and measures it.
func costRun(ctx context.Context, env benchEnv, name, bin string, n int, schemaPath string) (costFigures, error) {
	cfg := fmt.Sprintf("worker:\n  concurrency: 256\n  ack_wait: 60s\nsimulator:\n  latency_median: 800ms\n  latency_p99: 5s\n"+
		"schemas:\n  - id: customer_message\n    file: %s\n    repair: regenerate\n    prompt: extract.v1\n", schemaPath)
	s, err := newStack(ctx, env, name, cfg)
	if err != nil {
		return costFigures{}, err
	}
	defer s.close()
	if err := s.startSim(ctx); err != nil {
		return costFigures{}, err
	}
	batch, err := s.load(ctx, n)
	if err != nil {
		return costFigures{}, err
	}
	// A fresh pool: ingest's backends exit, and so report their
	// transactions, before the count starts.
	s.st.Close()
	if s.st, err = store.Open(ctx, s.dbURL, zap.NewNop()); err != nil {
		return costFigures{}, err
	}
	time.Sleep(time.Second)
	// The bench's own queries (the progress polls, the counts) go on one
	// connection, whose backend's CPU time is taken off Postgres's and
	// whose transactions are taken off the count.
	bc, err := s.st.Pool.Acquire(ctx)
	if err != nil {
		return costFigures{}, err
	}
	defer bc.Release()
	var benchPID int
	if err := bc.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&benchPID); err != nil {
		return costFigures{}, err
	}
	queries := 0 // the bench's own transactions, taken off the count
	xact := func() (int64, error) {
		var x int64
		queries++
		err := bc.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&x)
		return x, err
	}
	if env.profile {
		queries++
		if _, err := bc.Exec(ctx, `SELECT public.pg_stat_statements_reset()`); err != nil {
			return costFigures{}, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	x0, err := xact()
	if err != nil {
		return costFigures{}, err
	}
	sim := s.procs[0]
	pg0, nats0, sim0 := treeCPU(env.svc.pg.Proc().Pid()), processCPU(env.svc.nats.Proc().Pid()), processCPU(sim.Pid())
	bench0 := processCPU(benchPID)
	w, err := s.start(name+"-worker", bin, []string{"-health-addr", ""})
	if err != nil {
		return costFigures{}, err
	}
	var p progress
	for deadline := time.Now().Add(5 * time.Minute); ; {
		queries++
		if p, err = progressOn(ctx, bc, batch); err != nil {
			return costFigures{}, err
		}
		if p.Done == p.Total {
			break
		}
		if time.Now().After(deadline) || w.Exited() {
			return costFigures{}, fmt.Errorf("scenario %s: %d of %d runs done (worker exited: %v)\n%s", name, p.Done, p.Total, w.Exited(), devstack.Tail(w.LogPath(), 20))
		}
		select {
		case <-ctx.Done():
			return costFigures{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	f := costFigures{Throughput: p.throughput(), RSSMB: w.RSSMB()}
	workerCPU := processCPU(w.Pid())
	pgCPU := treeCPU(env.svc.pg.Proc().Pid()) - pg0 - (processCPU(benchPID) - bench0)
	natsCPU := processCPU(env.svc.nats.Proc().Pid()) - nats0
	simCPU := processCPU(sim.Pid()) - sim0
	subs, err := natsSubscriptions(env.svc.natsHTTP, "extractq-worker")
	if err != nil {
		return costFigures{}, err
	}
	w.Stop(syscall.SIGTERM, 10*time.Second)
	// The worker's backends report their last transactions as they exit.
	time.Sleep(1500 * time.Millisecond)
	x1, err := xact()
	if err != nil {
		return costFigures{}, err
	}
	calls, err := s.calls(ctx)
	if err != nil {
		return costFigures{}, err
	}
	if env.profile {
		if err := writeStatements(ctx, bc, filepath.Join(s.dir, "pg-statements.txt")); err != nil {
			return costFigures{}, err
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	f.WorkerUS, f.PGUS, f.NATSUS, f.SimUS = per(workerCPU), per(pgCPU), per(natsCPU), per(simCPU)
	f.ProductUS = f.WorkerUS + f.PGUS + f.NATSUS
	f.TxPerMsg = float64(x1-x0-int64(queries)+1) / float64(n)
	f.SubsPerMsg = float64(subs) / float64(n)
	f.CallsPer = float64(calls) / float64(n)
	return f, nil
}

// writeStatements writes the statements pg_stat_statements counted on
// the bench's Postgres since the reset, the most total execution time
// first, to path.
func writeStatements(ctx context.Context, c *pgxpool.Conn, path string) error {
	rows, err := c.Query(ctx, `SELECT calls, rows, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1),
		wal_bytes, regexp_replace(left(query, 160), '\s+', ' ', 'g')
		FROM public.pg_stat_statements ORDER BY total_exec_time DESC LIMIT 30`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%8s %8s %10s %9s %11s  %s\n", "calls", "rows", "exec ms", "plan ms", "WAL bytes", "query")
	for rows.Next() {
		var calls, nrows, wal int64
		var exec, plan float64
		var q string
		if err := rows.Scan(&calls, &nrows, &exec, &plan, &wal, &q); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%8d %8d %10.1f %9.1f %11d  %s\n", calls, nrows, exec, plan, wal, q)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// Rows written per table since the schema was made (the load
	// included), and how many updates were HOT (no index entry written).
	rows, err = c.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND n_tup_ins + n_tup_upd > 0 ORDER BY relname`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(&b, "\n%-24s %9s %9s %9s\n", "table", "inserted", "updated", "HOT")
	for rows.Next() {
		var name string
		var ins, upd, hot int64
		if err := rows.Scan(&name, &ins, &upd, &hot); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%-24s %9d %9d %9d\n", name, ins, upd, hot)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// natsSubscriptions returns how many subscriptions the connections named
// name made: NATS clients number their subscriptions from 1 in the order
// they make them, so the highest sid of a connection's live ones (its
// long-lived subscriptions, or a fetch's) counts them, from the server's
// /connz.
func natsSubscriptions(httpAddr, name string) (int, error) {
	resp, err := http.Get("http://" + httpAddr + "/connz?subs=detail&limit=1024")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var cz struct {
		Connections []struct {
			Name string `json:"name"`
			Subs []struct {
				Sid string `json:"sid"`
			} `json:"subscriptions_list_detail"`
		} `json:"connections"`
	}
	if err := json.Unmarshal(b, &cz); err != nil {
		return 0, fmt.Errorf("connz: %w", err)
	}
	total := 0
	for _, c := range cz.Connections {
		if c.Name != name {
			continue
		}
		top := 0
		for _, s := range c.Subs {
			if v, err := strconv.Atoi(s.Sid); err == nil && v > top {
				top = v
			}
		}
		total += top
	}
	return total, nil
}
