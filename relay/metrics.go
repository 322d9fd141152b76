package relay

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the relay's Prometheus metrics. A nil *Metrics counts
// nothing.
type Metrics struct {
	publishedC  *prometheus.CounterVec // copies stored, by via
	duplicatesC *prometheus.CounterVec // duplicate answers, by kind
	reconciledC *prometheus.CounterVec // runs the reconciler looked for, by result
}

// How a copy went onto the stream: the label via of
// extractq_relay_published_total.
const (
	viaPublish   = "publish"   // a first publish: ingest, a re-run
	viaSweep     = "sweep"     // a run recorded but never published
	viaRequeue   = "requeue"   // a worker put the run back
	viaReconcile = "reconcile" // the stream had lost it, or held another message under its id
)

// What a duplicate answer was: the label kind of
// extractq_relay_duplicates_total.
const (
	dupOwnRetry  = "own_retry" // the publish's own earlier attempt
	dupEarlier   = "earlier"   // an earlier publish of the run, never recorded
	dupGone      = "gone"      // its copy was acked already
	dupUnchecked = "unchecked" // its copy could not be read
	dupAnomaly   = "anomaly"   // another message under the run's id
)

// What the reconciler found: the label result of
// extractq_relay_reconciled_total.
const (
	resultOnStream    = "on_stream"
	resultRepublished = "republished"
	resultGivenUp     = "given_up" // the consumer gave up on its copy; routed as a max-deliveries advisory would
)

// NewMetrics registers the relay's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		publishedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_relay_published_total",
			Help: "Run copies the relay put on the stream (or found there), by via: publish, sweep, requeue, reconcile."}, []string{"via"}),
		duplicatesC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_relay_duplicates_total",
			Help: "Duplicate answers of the stream to a run's first publish, by kind: own_retry, earlier, gone, unchecked, anomaly (another message under the run's dedup id; the run was published under a fresh key)."}, []string{"kind"}),
		reconciledC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_relay_reconciled_total",
			Help: "Queued runs the reconciler looked for on the stream, by result: on_stream, republished (the stream no longer held them), given_up (the consumer gave up on their copy and no max-deliveries advisory routed them)."}, []string{"result"}),
	}
	reg.MustRegister(m.publishedC, m.duplicatesC, m.reconciledC)
	for _, v := range []string{viaPublish, viaSweep, viaRequeue, viaReconcile} {
		m.publishedC.WithLabelValues(v)
	}
	for _, k := range []string{dupOwnRetry, dupEarlier, dupGone, dupUnchecked, dupAnomaly} {
		m.duplicatesC.WithLabelValues(k)
	}
	for _, r := range []string{resultOnStream, resultRepublished, resultGivenUp} {
		m.reconciledC.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) published(via string) {
	if m != nil {
		m.publishedC.WithLabelValues(via).Inc()
	}
}

func (m *Metrics) duplicate(kind string) {
	if m != nil {
		m.duplicatesC.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) reconciled(result string) {
	if m != nil {
		m.reconciledC.WithLabelValues(result).Inc()
	}
}
