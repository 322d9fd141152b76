package ingestapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/extractq/extractq/ingest"
)

// serverMetrics are the HTTP ingest server's Prometheus metrics, all
// prefixed extractq_ingest_.
type serverMetrics struct {
	requests *prometheus.CounterVec   // answers, by route, method and HTTP status code
	duration *prometheus.HistogramVec // seconds per request, by route
	inFlight prometheus.Gauge
	lines    *prometheus.CounterVec // lines of POSTed bodies, by result
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_ingest_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "extractq_ingest_http_request_seconds",
			Help:    "Time from a request's headers to its answer's end, in seconds, by route.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "extractq_ingest_http_requests_in_flight",
			Help: "HTTP requests being served now."}),
		lines: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_ingest_lines_total",
			Help: "Lines of POSTed bodies, by result (published, duplicate, rejected)."}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.inFlight, m.lines)
	return m
}

// instrument counts and times h's requests under route, with the
// client_golang handler middleware. A nil m returns h.
func (m *serverMetrics) instrument(route string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	l := prometheus.Labels{"route": route}
	return promhttp.InstrumentHandlerInFlight(m.inFlight,
		promhttp.InstrumentHandlerDuration(m.duration.MustCurryWith(l),
			promhttp.InstrumentHandlerCounter(m.requests.MustCurryWith(l), h)))
}

// addLines counts what one POST's ingest did.
func (m *serverMetrics) addLines(sum *ingest.Summary) {
	if m == nil || sum == nil {
		return
	}
	m.lines.WithLabelValues("published").Add(float64(sum.Published))
	m.lines.WithLabelValues("duplicate").Add(float64(sum.Duplicates))
	m.lines.WithLabelValues("rejected").Add(float64(sum.Rejected))
}
