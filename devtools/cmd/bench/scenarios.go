package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/devtools/internal/devstack"
)

// result is one scenario's figures, side by side with its limit.
type result struct {
	Scenario string             `json:"scenario"`
	Name     string             `json:"name"`
	Measured float64            `json:"measured"`
	Limit    float64            `json:"limit"`
	Unit     string             `json:"unit"`
	Ratio    float64            `json:"ratio"` // measured / limit
	Goal     string             `json:"goal"`
	Pass     bool               `json:"pass"`
	Extra    map[string]float64 `json:"extra,omitempty"`
	Note     string             `json:"note,omitempty"`
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// drain loads n messages, starts workers, and waits until all are done.
// use is what the workers used, their start-up included.
func drain(ctx context.Context, s *stack, n, workers int, bare bool, timeout time.Duration) (_ progress, use procUsage, _ error) {
	batch, err := s.load(ctx, n)
	if err != nil {
		return progress{}, procUsage{}, err
	}
	var procs []*devstack.Proc
	for i := range workers {
		var p *devstack.Proc
		if bare {
			self, _ := os.Executable()
			p, err = s.start(fmt.Sprintf("bare-%d", i), self, []string{"-bare-worker"})
		} else {
			p, err = s.startWorker(fmt.Sprintf("worker-%d", i))
		}
		if err != nil {
			return progress{}, procUsage{}, err
		}
		procs = append(procs, p)
	}
	p, err := s.waitDone(ctx, batch, timeout)
	for _, w := range procs {
		use = use.add(processUsage(w.Pid()))
	}
	return p, use, err
}

// scenarioA compares the worker's CPU time per message with an instant
// simulator to the bare loop's: the same loop and writes with an instant
// in-process model (bare.go), so what is left is the cost of calling a
// provider over HTTP (encoding, the transport, decoding) and of the
// worker's configuration. The goal is at most 1.5 times the bare loop's
// (issue 18). CPU time, not messages per second: on a shared machine the
// rates of two runs moved by a third with the neighbours' load, the CPU
// per message by a few percent. The two run in turn, rounds times (real,
// bare, real, bare, ...); the figures are the means over the rounds, and
// the rates are reported beside them.
func scenarioA(ctx context.Context, env benchEnv, n, rounds int) (result, error) {
	// No latency and no faults: every message takes one call and succeeds,
	// as in the bare loop. Both read the customer_message schema without
	// its x-rules (as scenario R does): the simulator picks intent and flow
	// apart, so with the rules about two messages in three were repaired
	// and one in five failed, and the worker made 1.9 calls a message
	// against the bare loop's one. The calls, repairs and failures per
	// message are reported, and a run where the worker's are not the bare
	// loop's does not pass.
	schemaPath := filepath.Join(env.out, "customer_message.norules.json")
	if err := schemaWithoutRules(schemaPath); err != nil {
		return result{}, err
	}
	cfg := "worker:\n  concurrency: 64\nllm:\n  max_completion_tokens: 512\n" +
		"simulator:\n  invalid_json_rate: 0\n  fenced_rate: 0\n  prose_rate: 0\n  wrong_type_rate: 0\n" +
		"  missing_required_rate: 0\n  ungrounded_rate: 0\n  truncated_rate: 0\n" +
		fmt.Sprintf("schemas:\n  - id: customer_message\n    file: %s\n    prompt: extract.v1\n", schemaPath)
	r := result{Scenario: "A", Name: "overhead: worker CPU per message vs bare loop's (instant simulator)", Unit: "µs/msg", Goal: "<= 1.50",
		Extra: map[string]float64{"messages": float64(n), "rounds": float64(rounds)}}
	all := float64(n * rounds)
	run := func(name string, bare bool) (progress, procUsage, error) {
		s, err := newStack(ctx, env, name, cfg)
		if err != nil {
			return progress{}, procUsage{}, err
		}
		defer s.close()
		if !bare {
			if err := s.startSim(ctx); err != nil {
				return progress{}, procUsage{}, err
			}
		}
		p, use, err := drain(ctx, s, n, 1, bare, 5*time.Minute)
		if err == nil {
			// What it did per message: the comparison holds only while
			// both make one call and succeed (no repair, no triage item).
			var calls, repaired int
			if calls, repaired, err = s.work(ctx); err == nil {
				who := "worker"
				if bare {
					who = "bare"
				}
				r.Extra[who+"_calls_per_msg"] += float64(calls) / all
				r.Extra[who+"_repaired_per_msg"] += float64(repaired) / all
				r.Extra[who+"_failed_per_msg"] += float64(p.Failed) / all
			}
		}
		return p, use, err
	}
	var realRate, bareRate float64
	var realUse, bareUse procUsage
	for i := range rounds {
		real, realU, err := run(fmt.Sprintf("a-real-%d", i+1), false)
		if err != nil {
			return result{}, err
		}
		bare, bareU, err := run(fmt.Sprintf("a-bare-%d", i+1), true)
		if err != nil {
			return result{}, err
		}
		realUse, bareUse = realUse.add(realU), bareUse.add(bareU)
		realCPU, bareCPU := realU.cpu, bareU.cpu
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
		r.Measured += per(realCPU) / float64(rounds)
		r.Limit += per(bareCPU) / float64(rounds)
		realRate += real.throughput() / float64(rounds)
		bareRate += bare.throughput() / float64(rounds)
		r.Extra[fmt.Sprintf("cpu_ratio_round_%d", i+1)] = ratio(per(realCPU), per(bareCPU))
		r.Extra[fmt.Sprintf("rate_ratio_round_%d", i+1)] = ratio(real.throughput(), bare.throughput())
	}
	r.Extra["worker_msg_per_s"], r.Extra["bare_msg_per_s"] = realRate, bareRate
	// System time and system calls per message: what the HTTP call adds
	// is mostly the kernel's, and the calls are counts, steady however
	// loaded the machine.
	for name, u := range map[string]procUsage{"worker": realUse, "bare": bareUse} {
		r.Extra[name+"_sys_us_per_msg"] = float64(u.sys.Microseconds()) / all
		r.Extra[name+"_reads_per_msg"] = float64(u.reads) / all
		r.Extra[name+"_writes_per_msg"] = float64(u.writes) / all
	}
	r.Ratio = ratio(r.Measured, r.Limit)
	r.Pass = r.Ratio <= 1.5
	if r.Extra["worker_calls_per_msg"] > 1.001 || r.Extra["worker_repaired_per_msg"] > 0 || r.Extra["worker_failed_per_msg"] > 0 {
		// Not the bare loop's work: the ratio says nothing of the call's cost.
		r.Pass = false
		r.Note = fmt.Sprintf("not like with like: the worker made %.2f calls a message, repaired %.1f%% and failed %.1f%% (the bare loop: one call, none)",
			r.Extra["worker_calls_per_msg"], 100*r.Extra["worker_repaired_per_msg"], 100*r.Extra["worker_failed_per_msg"])
	}
	return r, nil
}

// lognormalMean is the mean of a log-normal with this median and p99.
func lognormalMean(median, p99 time.Duration) float64 {
	sigma := (math.Log(p99.Seconds()) - math.Log(median.Seconds())) / 2.3263
	return median.Seconds() * math.Exp(sigma*sigma/2)
}

// scenarioB measures throughput at in-flight C against C / mean latency.
func scenarioB(ctx context.Context, env benchEnv, c int, n int) (result, error) {
	median, p99 := 800*time.Millisecond, 5*time.Second
	cfg := fmt.Sprintf("worker:\n  concurrency: %d\n  ack_wait: 60s\nsimulator:\n  latency_median: %s\n  latency_p99: %s\n", c, median, p99)
	s, err := newStack(ctx, env, fmt.Sprintf("b-%d", c), cfg)
	if err != nil {
		return result{}, err
	}
	defer s.close()
	if err := s.startSim(ctx); err != nil {
		return result{}, err
	}
	batch, err := s.load(ctx, n)
	if err != nil {
		return result{}, err
	}
	statements := env.profile && env.svc != nil
	if statements {
		if _, err := s.st.Pool.Exec(ctx, `SELECT public.pg_stat_statements_reset()`); err != nil {
			return result{}, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	w, pprofAddr, err := s.startWorkerProfiled("worker-0")
	if err != nil {
		return result{}, err
	}
	rss := watchRSS(w)
	if pprofAddr != "" {
		// The heap at half the batch, when every slot is busy.
		go s.heapAt(ctx, batch, n/2, pprofAddr, filepath.Join(s.dir, "worker-0.heap.pprof"))
	}
	p, err := s.waitDone(ctx, batch, 5*time.Minute)
	peak := rss()
	workerCPU := processCPU(w.Pid()) // start-up included
	if err != nil {
		return result{}, err
	}
	if statements {
		c, err := s.st.Pool.Acquire(ctx)
		if err != nil {
			return result{}, err
		}
		err = writeStatements(ctx, c, filepath.Join(s.dir, "pg-statements.txt"))
		c.Release()
		if err != nil {
			return result{}, err
		}
	}
	buckets, err := s.perSecond(ctx, batch)
	if err != nil {
		return result{}, err
	}
	// Runs with a repair make two calls: the limit counts calls.
	calls, err := s.calls(ctx)
	if err != nil {
		return result{}, err
	}
	callsPerRun := float64(calls) / float64(p.Done)
	limit := float64(c) / lognormalMean(median, p99) / callsPerRun
	r := result{Scenario: "B", Name: fmt.Sprintf("latency: in-flight %d, log-normal median 800ms p99 5s", c), Unit: "msg/s",
		Measured: p.throughput(), Limit: limit, Goal: ">= 0.90"}
	r.Ratio = ratio(r.Measured, r.Limit)
	r.Pass = r.Ratio >= 0.9
	gap := longestGap(buckets)
	full := backlogSeconds(buckets, n, c)
	fullGap := longestGap(buckets[:full])
	var per strings.Builder
	for i, b := range buckets {
		fmt.Fprintf(&per, "%d %d\n", i, b)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "outcomes-per-second.txt"), []byte(per.String()), 0o644); err != nil {
		return result{}, err
	}
	r.Extra = map[string]float64{"messages": float64(n), "calls_per_run": callsPerRun, "worker_peak_rss_mb": peak,
		"longest_gap_s": float64(gap), "longest_gap_backlog_s": float64(fullGap), "backlog_s": float64(full),
		"worker_cpu_us_per_msg": float64(workerCPU.Microseconds()) / float64(n)}
	if c >= 2048 {
		// The memory goal: 2,048 in flight under 200 MB, and no stall: no
		// second without an outcome while more runs remained than slots
		// (longest_gap_backlog_s 0). After that the last runs wait only
		// on their calls, and with a p99 of 5 s (repairs: two calls) a
		// second without an outcome among the last few dozen is the
		// latency's tail, not a stall; longest_gap_s counts those too.
		// Throughput at 2,048 is reported, not judged (issue 18's goal):
		// on 2 cores the machine, not the worker's slots, bounds it.
		r.Goal = "worker RSS < 200 MB, no stall; msg/s reported"
		r.Pass = peak < 200 && fullGap == 0
	}
	return r, nil
}

// backlogSeconds is how many seconds, from the first outcome's, began
// with more than c of the n runs left (buckets are the outcomes of each
// second): while they last, every one of c slots has a run.
func backlogSeconds(buckets []int, n, c int) int {
	done := 0
	for i, b := range buckets {
		if n-done <= c {
			return i
		}
		done += b
	}
	return len(buckets)
}

// longestGap is the longest run of seconds without an outcome between the
// first and the last outcome.
func longestGap(buckets []int) int {
	longest, cur := 0, 0
	for _, b := range buckets {
		if b == 0 {
			cur++
			longest = max(longest, cur)
		} else {
			cur = 0
		}
	}
	return longest
}

// watchRSS samples p's RSS every 250 ms until the returned function is
// called, which returns the peak in MB.
func watchRSS(p *devstack.Proc) func() float64 {
	done := make(chan struct{})
	peak := make(chan float64, 1)
	go func() {
		var m float64
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			m = max(m, p.RSSMB())
			select {
			case <-done:
				peak <- m
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 { close(done); return <-peak }
}

// heapAt writes the worker's heap profile (pprof at addr) to path once
// done runs of batch have an outcome; failures are logged, not fatal.
func (s *stack) heapAt(ctx context.Context, batch string, done int, addr, path string) {
	for {
		p, err := s.progress(ctx, batch)
		if err != nil {
			return
		}
		if p.Done >= done {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	// The profile for pprof, its text form (which ends with the runtime's
	// memory statistics: stacks, heap in use and released) and the
	// goroutines by stack.
	for _, f := range []struct{ query, file string }{
		{"heap", path}, {"heap?debug=1", path + ".txt"}, {"goroutine?debug=1", filepath.Join(filepath.Dir(path), "worker-0.goroutines.txt")},
	} {
		if err := fetchTo("http://"+addr+"/debug/pprof/"+f.query, f.file); err != nil {
			s.log.Warn("heap profile", zap.Error(err))
		}
	}
}

func fetchTo(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func (s *stack) calls(ctx context.Context) (int, error) {
	var n int
	err := s.st.Pool.QueryRow(ctx, `SELECT count(*) FROM llm_calls`).Scan(&n)
	return n, err
}

// simStats reads the simulator's counters.
func (s *stack) simStats() (map[string]any, error) {
	resp, err := http.Get("http://" + s.simAddr + "/admin/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	return m, json.NewDecoder(resp.Body).Decode(&m)
}

func statInt(m map[string]any, key string) float64 {
	f, _ := m[key].(float64)
	return f
}

func statusCount(m map[string]any, code string) float64 {
	by, _ := m["by_status"].(map[string]any)
	f, _ := by[code].(float64)
	return f
}

// scenarioC: the simulator enforces a request limit (per minute, scaled to
// a short run); the worker's own limiter has the same limit.
func scenarioC(ctx context.Context, env benchEnv, n int) (result, error) {
	const rpm = 3000 // 50 requests per second
	cfg := fmt.Sprintf("worker:\n  concurrency: 64\nprovider:\n  requests_per_minute: %d\nsimulator:\n  requests_per_minute: %d\n  latency_median: 20ms\n  latency_p99: 100ms\n", rpm, rpm)
	s, err := newStack(ctx, env, "c", cfg)
	if err != nil {
		return result{}, err
	}
	defer s.close()
	if err := s.startSim(ctx); err != nil {
		return result{}, err
	}
	p, _, err := drain(ctx, s, n, 1, false, 5*time.Minute)
	if err != nil {
		return result{}, err
	}
	st, err := s.simStats()
	if err != nil {
		return result{}, err
	}
	calls, err := s.calls(ctx)
	if err != nil {
		return result{}, err
	}
	callsPerSec := p.throughput() * float64(calls) / float64(p.Done)
	limited := statusCount(st, "429")
	share := ratio(limited, statInt(st, "requests"))
	r := result{Scenario: "C", Name: "provider limits: 3000 requests/min enforced with 429", Unit: "calls/s",
		Measured: callsPerSec, Limit: rpm / 60.0, Goal: ">= 0.95, 429s <= 2%"}
	r.Ratio = ratio(r.Measured, r.Limit)
	r.Pass = r.Ratio >= 0.95 && share <= 0.02
	r.Extra = map[string]float64{"messages": float64(n), "share_429": share, "requests": statInt(st, "requests")}
	return r, nil
}

// scenarioD: a backlog of n messages waits (loaded by the bulk path) and
// the worker runs 2,048 in flight; its RSS must stay flat.
func scenarioD(ctx context.Context, env benchEnv, n int, watch time.Duration) (result, error) {
	s, err := newStack(ctx, env, "d", "worker:\n  concurrency: 2048\n")
	if err != nil {
		return result{}, err
	}
	defer s.close()
	if err := s.startSim(ctx); err != nil {
		return result{}, err
	}
	loadStart := time.Now()
	if _, err := s.bulkLoad(ctx, n, true); err != nil {
		return result{}, err
	}
	loadS := time.Since(loadStart).Seconds()
	w, err := s.startWorker("worker-0")
	if err != nil {
		return result{}, err
	}
	var peak, at10 float64
	start := time.Now()
	var last float64
	for time.Since(start) < watch {
		time.Sleep(500 * time.Millisecond)
		last = w.RSSMB()
		peak = max(peak, last)
		if at10 == 0 && time.Since(start) >= 10*time.Second {
			at10 = last
		}
	}
	r := result{Scenario: "D", Name: fmt.Sprintf("backlog: %d messages waiting, 2,048 in flight, worker RSS over %s", n, watch), Unit: "MB",
		Measured: peak, Limit: 200, Goal: "peak < 200 MB, flat"}
	growth := last - at10
	r.Ratio = ratio(peak, 200)
	r.Pass = peak < 200 && growth < 0.2*at10+10
	r.Extra = map[string]float64{"rss_at_10s_mb": at10, "rss_end_mb": last, "growth_mb": growth, "load_s": loadS}
	return r, nil
}

// scenarioE: every call fails for 30 s mid-run; nothing goes to triage,
// nothing is lost, throughput recovers within 10 s.
func scenarioE(ctx context.Context, env benchEnv, n int, outage time.Duration) (result, error) {
	// The shipped delivery limit: provider failures spend no deliveries.
	// A 2 s breaker cooldown, as the 10 s recovery goal is tighter than the
	// shipped 30 s cooldown (work resumes within one cooldown).
	cfg := "worker:\n  concurrency: 64\nprovider:\n  max_interval: 2s\n  breaker_cooldown: 2s\n  max_elapsed_time: 5m\nsimulator:\n  latency_median: 100ms\n  latency_p99: 500ms\n"
	s, err := newStack(ctx, env, "e", cfg)
	if err != nil {
		return result{}, err
	}
	defer s.close()
	if err := s.startSim(ctx); err != nil {
		return result{}, err
	}
	batch, err := s.load(ctx, n)
	if err != nil {
		return result{}, err
	}
	if _, err := s.startWorker("worker-0"); err != nil {
		return result{}, err
	}
	time.Sleep(10 * time.Second)
	outStart := time.Now()
	resp, err := http.Post(fmt.Sprintf("http://%s/admin/outage?seconds=%d", s.simAddr, int(outage.Seconds())), "", nil)
	if err != nil {
		return result{}, err
	}
	resp.Body.Close()
	p, err := s.waitDone(ctx, batch, 10*time.Minute)
	if err != nil {
		return result{}, err
	}
	buckets, err := s.perSecond(ctx, batch)
	if err != nil {
		return result{}, err
	}
	// Before: the mean rate of the seconds before the outage; recovery: the
	// first second after it ends at 80% of that rate.
	off := int(outStart.Sub(p.First).Seconds())
	before := 0.0
	for i := 1; i < off && i < len(buckets); i++ {
		before += float64(buckets[i])
	}
	if off > 1 {
		before /= float64(off - 1)
	}
	end := off + int(outage.Seconds())
	recovery := -1.0
	for i := end; i < len(buckets); i++ {
		if float64(buckets[i]) >= 0.8*before {
			recovery = float64(i - end)
			break
		}
	}
	if recovery < 0 && p.Last.Sub(p.First).Seconds() < float64(end) {
		recovery = 0 // the backlog was drained before the outage ended
	}
	// Runs the outage sent to triage: transport or delivery failures. The
	// simulator's usual content faults still fail a few runs (parse,
	// schema, truncated), as in any run; they are counted apart.
	var outageFailed int
	if err := s.st.Pool.QueryRow(ctx, `SELECT count(*) FROM triage_items t JOIN runs r USING (message_id, run_no)
		WHERE r.batch_id = $1 AND t.reason IN ('transport', 'delivery')`, batch).Scan(&outageFailed); err != nil {
		return result{}, err
	}
	r := result{Scenario: "E", Name: fmt.Sprintf("outage: every call fails for %s mid-run", outage), Unit: "s to recover",
		Measured: recovery, Limit: 10, Goal: "outage triage 0, lost 0, recovery <= 10 s"}
	r.Ratio = ratio(recovery, 10)
	r.Pass = outageFailed == 0 && p.Done == p.Total && recovery >= 0 && recovery <= 10
	r.Extra = map[string]float64{"messages": float64(n), "to_triage_by_outage": float64(outageFailed),
		"to_triage_content_faults": float64(p.Failed - outageFailed), "lost": float64(p.Total - p.Done), "rate_before": before}
	return r, nil
}

// scenarioF runs devtools/cmd/repaircompare and reports tokens per message and per
// repaired message for both repair strategies.
func scenarioF(ctx context.Context, env benchEnv, n int) ([]result, error) {
	path := filepath.Join(env.out, "repaircompare.json")
	cmd := exec.CommandContext(ctx, filepath.Join(env.bin, "repaircompare"), "-n", fmt.Sprint(n), "-json", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("repaircompare: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep struct {
		Strategies []struct {
			Strategy                   string  `json:"strategy"`
			Messages                   int     `json:"messages"`
			Repaired                   int     `json:"repaired"`
			RepairCalls                int     `json:"repair_calls"`
			PromptTokens               int     `json:"prompt_tokens"`
			CompletionTokens           int     `json:"completion_tokens"`
			RepairPromptTokens         int     `json:"repair_prompt_tokens"`
			RepairCompletionTokens     int     `json:"repair_completion_tokens"`
			MeanRepairCompletionTokens float64 `json:"mean_repair_completion_tokens"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("repaircompare JSON: %w", err)
	}
	if len(rep.Strategies) != 2 {
		return nil, fmt.Errorf("repaircompare: %d strategies, want 2", len(rep.Strategies))
	}
	var out []result
	var regen float64
	for _, st := range rep.Strategies {
		perMsg := float64(st.PromptTokens+st.CompletionTokens) / float64(st.Messages)
		perRepaired := 0.0
		if st.Repaired > 0 {
			perRepaired = float64(st.RepairPromptTokens+st.RepairCompletionTokens) / float64(st.RepairCalls)
		}
		r := result{Scenario: "F", Name: "repair cost, " + st.Strategy + " (nested schema, simulator)", Unit: "completion tok/repair",
			Measured: st.MeanRepairCompletionTokens, Goal: "report"}
		if st.Strategy == "regenerate" {
			regen = st.MeanRepairCompletionTokens
		}
		r.Pass = true
		r.Extra = map[string]float64{"tokens_per_message": perMsg, "tokens_per_repair_call": perRepaired,
			"repaired": float64(st.Repaired), "messages": float64(st.Messages)}
		out = append(out, r)
	}
	for i := range out {
		out[i].Limit = regen
		out[i].Ratio = ratio(out[i].Measured, regen)
	}
	return out, nil
}
