package triage

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/extractq/extractq/store"
)

// metrics are the triage server's Prometheus metrics, all prefixed
// extractq_triage_. A nil *metrics counts nothing.
type metrics struct {
	requests  *prometheus.CounterVec   // answers, by route, method and HTTP status code
	duration  *prometheus.HistogramVec // seconds per request, by route
	decisions *prometheus.CounterVec   // items decided, by decision and via
}

func newMetrics(reg prometheus.Registerer, st *store.Store) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_triage_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "extractq_triage_http_request_seconds",
			Help:    "Time to answer a request, in seconds, by route (the live-update stream counts when it ends).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}, []string{"route"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extractq_triage_decisions_total",
			Help: "Triage items decided, by decision (approved, rejected, rerun) and via (ui, api)."}, []string{"decision", "via"}),
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "extractq_triage_open_items",
		Help: "Triage items open now, read from Postgres at each scrape (NaN when it does not answer within 2s)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := st.TriageOpenCount(ctx, st.Pool)
			if err != nil {
				return math.NaN()
			}
			return float64(n)
		})
	reg.MustRegister(m.requests, m.duration, m.decisions, open)
	// Every decision's series from the start, at 0, so a rate over them
	// needs no first decision.
	for _, d := range []string{store.TriageApproved, store.TriageRejected, store.TriageRerun} {
		for _, via := range []string{store.ViaUI, store.ViaAPI} {
			m.decisions.WithLabelValues(d, via)
		}
	}
	return m
}

// instrument counts and times h's requests under pattern's path, with the
// client_golang handler middleware.
func (m *metrics) instrument(pattern string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	route := pattern
	if _, path, ok := strings.Cut(pattern, " "); ok {
		route = path
	}
	l := prometheus.Labels{"route": route}
	return promhttp.InstrumentHandlerDuration(m.duration.MustCurryWith(l),
		promhttp.InstrumentHandlerCounter(m.requests.MustCurryWith(l), h))
}

// decided counts n items decided as decision via via.
func (m *metrics) decided(decision, via string, n int) {
	if m != nil && n > 0 {
		m.decisions.WithLabelValues(decision, via).Add(float64(n))
	}
}
