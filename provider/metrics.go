package provider

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// metrics are the Transport's Prometheus collectors:
//
//	extractq_provider_calls_total{result="ok"|"error", class}    calls, each with all its retries
//	extractq_provider_retries_total{class}                        retries, by the class that caused them
//	extractq_provider_rate_limit_wait_seconds_total{reason}       time spent waiting for a rate limit:
//	    requests_limit, tokens_limit (client-side limiters), provider_headers
//	    (x-ratelimit-remaining-* reached 0), retry_after (waits before retrying a 429)
//	extractq_provider_breaker_state                               0 closed, 1 half-open, 2 open (or paused by
//	    another replica's breaker)
//	extractq_provider_limit_share                                 the part of requests_per_minute and
//	    tokens_per_minute this process uses: 1/n of n live replicas (SetShare)
//	extractq_provider_tool_arguments_rewritten_total              replies whose tool-call arguments came as
//	    JSON values, not strings (llama.cpp server), and were rewritten as strings
type metrics struct {
	calls    *prometheus.CounterVec
	retries  *prometheus.CounterVec
	waits    *prometheus.CounterVec
	toolArgs prometheus.Counter
	share    prometheus.Gauge
	callsOK  prometheus.Counter // calls{result="ok",class="none"}, looked up once
}

func newMetrics(reg prometheus.Registerer, state func() float64, log *zap.Logger) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "extractq", Subsystem: "provider", Name: "calls_total",
			Help: "LLM provider calls (each with all its retries) by result (ok, error) and error class.",
		}, []string{"result", "class"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "extractq", Subsystem: "provider", Name: "retries_total",
			Help: "Retries of LLM provider requests, by the error class that caused them.",
		}, []string{"class"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "extractq", Subsystem: "provider", Name: "rate_limit_wait_seconds_total",
			Help: "Seconds spent waiting for rate limits, by reason (requests_limit, tokens_limit, provider_headers, retry_after).",
		}, []string{"reason"}),
		toolArgs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "extractq", Subsystem: "provider", Name: "tool_arguments_rewritten_total",
			Help: "Chat completions whose tool-call arguments came as JSON values, not strings, and were rewritten as strings.",
		}),
		share: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "extractq", Subsystem: "provider", Name: "limit_share",
			Help: "Part of the configured requests and tokens per minute this process uses: 1/n of n live replicas.",
		}),
	}
	m.share.Set(1)
	if reg == nil {
		m.callsOK = m.calls.WithLabelValues("ok", "none")
		return m
	}
	m.calls = register(reg, m.calls, log)
	m.retries = register(reg, m.retries, log)
	m.waits = register(reg, m.waits, log)
	m.toolArgs = register(reg, m.toolArgs, log)
	m.share = register(reg, m.share, log)
	m.callsOK = m.calls.WithLabelValues("ok", "none")
	register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "extractq", Subsystem: "provider", Name: "breaker_state",
		Help: "State of the LLM provider circuit breaker: 0 closed, 1 half-open, 2 open.",
	}, state), log)
	return m
}

// register registers c on reg; when an equal collector is already there
// (a second Transport on the same registry), it returns that one.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *zap.Logger) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	log.Warn("registering provider metric failed", zap.Error(err))
	return c
}
