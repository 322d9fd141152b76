package relay

import "github.com/prometheus/client_golang/prometheus"

// ResultsMetrics are the results relay's Prometheus metrics. A nil
// *ResultsMetrics counts nothing.
type ResultsMetrics struct {
	publishedC   prometheus.Counter
	failedC      prometheus.Counter
	republishedC prometheus.Counter
	purgedC      prometheus.Counter
}

// NewResultsMetrics registers the results relay's metrics on reg.
func NewResultsMetrics(reg prometheus.Registerer) *ResultsMetrics {
	m := &ResultsMetrics{
		publishedC: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_results_published_total",
			Help: "Results outbox rows published on the results stream (or found there) and recorded."}),
		failedC: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_results_publish_failures_total",
			Help: "Publish passes of the results relay stopped by a failed publish or purge (the rows wait for the next pass)."}),
		republishedC: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_results_republished_total",
			Help: "Outbox rows marked to be published again because the results stream lost what it held."}),
		purgedC: prometheus.NewCounter(prometheus.CounterOpts{Name: "extractq_results_erasure_purges_total",
			Help: "Erased events published, each purging its message's earlier events from the results stream."}),
	}
	reg.MustRegister(m.publishedC, m.failedC, m.republishedC, m.purgedC)
	return m
}

func (m *ResultsMetrics) published(n int, failed bool) {
	if m == nil {
		return
	}
	m.publishedC.Add(float64(n))
	if failed {
		m.failedC.Inc()
	}
}

func (m *ResultsMetrics) republished(n int) {
	if m != nil {
		m.republishedC.Add(float64(n))
	}
}

func (m *ResultsMetrics) purged() {
	if m != nil {
		m.purgedC.Inc()
	}
}
