package worker

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
)

// Metrics are the worker's Prometheus metrics, all prefixed extractq_.
type Metrics struct {
	runs         *prometheus.CounterVec   // runs finished, by outcome and reason
	naks         *prometheus.CounterVec   // runs put back, by cause
	writeRetries prometheus.Counter       // outcome writes tried again after a transient failure
	calls        *prometheus.CounterVec   // LLM calls, by purpose and result (valid, invalid)
	tokens       *prometheus.CounterVec   // tokens, by kind (prompt, cached: the part of prompt from the cache, completion)
	cost         prometheus.Counter       // US dollars
	callLatency  *prometheus.HistogramVec // seconds per call, by purpose
	runDuration  prometheus.Histogram     // seconds from delivery to decision
	inFlight     prometheus.Gauge
	redeliveries prometheus.Counter     // deliveries of runs that already had an outcome
	leased       prometheus.Counter     // deliveries of runs another copy of which was being worked on
	suspects     prometheus.Counter     // redelivered runs run alone (queue.Isolation)
	announced    *prometheus.CounterVec // triage announcements, by result (sent, failed)
	batchSteps   prometheus.Histogram   // run steps (starts, outcomes) per shared transaction
	batchWait    prometheus.Histogram   // seconds a step waited for its shared transaction to begin
	worker       atomic.Pointer[Worker] // whose pauses extractq_worker_paused reports
}

// NewMetrics registers the worker's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_runs_total",
			Help: "Runs given an outcome, by outcome (succeeded, repaired, failed) and failure reason (error kind)."}, []string{"outcome", "reason"}),
		naks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_run_naks_total",
			Help: "Runs put back on the stream for a later delivery, by cause (provider, database, shutdown)."}, []string{"cause"}),
		writeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_outcome_write_retries_total",
			Help: "Outcome writes tried again, the result held, after a transient database failure (Postgres restarting or unreachable, connections exhausted)."}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_llm_calls_total",
			Help: "LLM calls answered, by purpose (extract, repair) and result (valid, invalid)."}, []string{"purpose", "result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_llm_tokens_total",
			Help: "Tokens of answered LLM calls, by kind (prompt, cached: the part of prompt served from the provider's cache, completion)."}, []string{"kind"}),
		cost: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_llm_cost_usd_total",
			Help: "Cost of answered LLM calls in US dollars, from the price table."}),
		callLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "extractq_llm_call_seconds",
			Help:    "Latency of answered LLM calls in seconds, retries included, by purpose.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64}}, []string{"purpose"}),
		runDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "extractq_run_seconds",
			Help:    "Time from a run's delivery to its ack or nak, in seconds.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128}}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "extractq_runs_in_flight",
			Help: "Runs being handled now by this worker."}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_redeliveries_acked_total",
			Help: "Deliveries of runs that already had an outcome, acked without an LLM call."}),
		leased: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_lease_held_acked_total",
			Help: "Deliveries of a run another copy of which was being worked on under a live lease, acked without an LLM call."}),
		suspects: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_suspect_runs_total",
			Help: "Redelivered runs (an earlier delivery ended without an outcome: a worker died or stalled on it, or its handler panicked) run alone, with nothing else in flight."}),
		announced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_triage_announcements_total",
			Help: "New triage items announced on NATS, by result (sent, failed)."}, []string{"result"}),
		batchSteps: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "extractq_worker_db_batch_steps",
			Help:    "Run steps (a run's read and lease, or its outcome) per shared Postgres transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}),
		batchWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "extractq_worker_db_batch_wait_seconds",
			Help:    "Time a run step waited for its shared Postgres transaction to begin, in seconds: the latency batching adds (worker.commit_wait, at most 5% of the median call latency).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25}}),
	}
	reg.MustRegister(m.runs, m.naks, m.writeRetries, m.calls, m.tokens, m.cost, m.callLatency, m.runDuration, m.inFlight, m.redeliveries, m.leased, m.suspects, m.announced,
		m.batchSteps, m.batchWait)
	for _, reason := range []string{PauseProvider, PauseDatabase} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "extractq_worker_paused",
			Help:        "1 while the worker takes no new work, by reason: provider (its circuit breaker is open or half-open), database (Postgres unreachable).",
			ConstLabels: prometheus.Labels{"reason": reason}}, func() float64 { return m.paused(reason) }))
	}
	return m
}

// watch makes extractq_worker_paused report w's pauses.
func (m *Metrics) watch(w *Worker) {
	if m != nil {
		m.worker.Store(w)
	}
}

func (m *Metrics) paused(reason string) float64 {
	w := m.worker.Load()
	if w == nil {
		return 0
	}
	for _, p := range w.Paused() {
		if p.Reason == reason {
			return 1
		}
	}
	return 0
}

func (m *Metrics) observe(res *pipeline.Result) {
	if m == nil || res == nil {
		return
	}
	m.runs.WithLabelValues(res.Outcome, string(res.Reason())).Inc()
	m.observeCalls(res.Calls)
}

// observeCalls counts answered calls, those of deliveries that did not
// decide their run included.
func (m *Metrics) observeCalls(calls []pipeline.Call) {
	if m == nil {
		return
	}
	for _, c := range calls {
		result := "valid"
		if !c.Valid() {
			result = "invalid"
		}
		m.calls.WithLabelValues(c.Purpose, result).Inc()
		m.tokens.WithLabelValues("prompt").Add(float64(c.PromptTokens))
		m.tokens.WithLabelValues("cached").Add(float64(c.CachedTokens))
		m.tokens.WithLabelValues("completion").Add(float64(c.CompletionTokens))
		m.cost.Add(c.CostUSD)
		m.callLatency.WithLabelValues(c.Purpose).Observe(c.Latency.Seconds())
	}
}

func (m *Metrics) announce(result string) {
	if m != nil {
		m.announced.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) nak(cause string) {
	if m != nil {
		m.naks.WithLabelValues(cause).Inc()
	}
}

func (m *Metrics) writeRetry() {
	if m != nil {
		m.writeRetries.Inc()
	}
}

// suspectRun counts a redelivered run that begins to run alone; it is
// the consumer's OnSuspect (queue.ConsumerOptions).
func (m *Metrics) suspectRun(*queue.Delivery) {
	if m != nil {
		m.suspects.Inc()
	}
}

func (m *Metrics) leaseHeld() {
	if m != nil {
		m.leased.Inc()
	}
}

// batch records one shared transaction's size and its steps' waits.
func (m *Metrics) batch(size int, waited []time.Duration) {
	if m == nil {
		return
	}
	m.batchSteps.Observe(float64(size))
	for _, w := range waited {
		m.batchWait.Observe(w.Seconds())
	}
}
