package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// ServiceConfig configures RunService.
type ServiceConfig struct {
	Worker   *Worker
	Store    *store.Store
	Conn     *nats.Conn
	Consumer jetstream.Consumer
	// JS, NATS and DeadLetter, when set, run the consumer of the
	// max-deliveries advisories (queue.EnsureDeadLetter): runs that ran out
	// of deliveries go to triage as kind delivery.
	JS         jetstream.JetStream
	NATS       config.NATS
	DeadLetter jetstream.Consumer
	// Ready gates fetching (see queue.ConsumerOptions.Ready). Default
	// Worker.Ready.
	Ready func(ctx context.Context) (queue.Admit, error)
	// Publisher publishes the sweeper's runs and the worker's requeues
	// (queue.Requeue): without it, a run the provider failed is nak'ed and
	// spends one of its deliveries.
	Publisher *queue.Publisher
	// Consumer options: see queue.ConsumerOptions.
	Concurrency     int
	InProgressEvery time.Duration
	ShutdownGrace   time.Duration
	TermWithReason  bool
	// HealthAddr serves /healthz, /readyz and /metrics; empty means none.
	HealthAddr string
	// Gatherer, if set, is served on /metrics.
	Gatherer prometheus.Gatherer
	// Pprof serves Go's profiles on /debug/pprof/ beside the health
	// endpoints. Off by default: only for a listener that is not exposed.
	Pprof bool
	// SweepEvery is how often runs recorded but never published (an ingest
	// that died between its write and its publish) are published again.
	// Default 30s; negative means never.
	SweepEvery time.Duration
	// SweepAge is how old an unpublished run must be to be swept. Default 1m.
	SweepAge time.Duration
	Logger   *zap.Logger
}

// RunService consumes run messages until ctx ends, with the health
// endpoints and the publish sweeper beside it. It returns nil after a
// clean shutdown: fetching stops, in-flight runs finish or are requeued
// within ShutdownGrace.
func RunService(ctx context.Context, cfg ServiceConfig) error {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	var consuming atomic.Bool
	var wg sync.WaitGroup
	var srv *http.Server
	if cfg.HealthAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			rctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			paused := cfg.Worker.Paused()
			switch {
			case !consuming.Load():
				http.Error(w, "not consuming", http.StatusServiceUnavailable)
			case cfg.Conn != nil && !cfg.Conn.IsConnected():
				http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
			case len(paused) > 0:
				var b strings.Builder
				for _, p := range paused {
					fmt.Fprintf(&b, "paused: %s: %s\n", p.Reason, p.Detail)
				}
				http.Error(w, strings.TrimSuffix(b.String(), "\n"), http.StatusServiceUnavailable)
			case cfg.Store.Pool.Ping(rctx) != nil:
				http.Error(w, "postgres unreachable", http.StatusServiceUnavailable)
			default:
				w.Write([]byte("ready\n"))
			}
		})
		if cfg.Pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		}
		if cfg.Gatherer != nil {
			mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
		}
		ln, err := net.Listen("tcp", cfg.HealthAddr)
		if err != nil {
			return err
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("health server stopped", zap.Error(err))
			}
		}()
		log.Info("health endpoints listening", zap.String("addr", ln.Addr().String()))
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = 30 * time.Second
	}
	if cfg.SweepAge == 0 {
		cfg.SweepAge = time.Minute
	}
	if cfg.SweepEvery > 0 && cfg.Publisher != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(cfg.SweepEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if n, err := Sweep(ctx, cfg.Store, cfg.Publisher, cfg.SweepAge); err != nil {
						log.Warn("publish sweep failed", zap.Error(err))
					} else if n > 0 {
						log.Info("published runs that had not been published", zap.Int("runs", n))
					}
				}
			}
		}()
	}

	if cfg.DeadLetter != nil && cfg.JS != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			queue.RunDeadLetter(ctx, cfg.JS, cfg.NATS, cfg.DeadLetter, cfg.Worker.DeliveryFailed, log)
		}()
	}

	if cfg.Ready == nil {
		cfg.Ready = cfg.Worker.Ready
	}
	consuming.Store(true)
	err := queue.Run(ctx, cfg.Consumer, cfg.Worker.Handle, queue.ConsumerOptions{
		Concurrency: cfg.Concurrency, InProgressEvery: cfg.InProgressEvery, ShutdownGrace: cfg.ShutdownGrace,
		TermWithReason: cfg.TermWithReason, Ready: cfg.Ready, Publisher: cfg.Publisher, Log: log,
	})
	consuming.Store(false)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		srv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	cfg.Worker.Close()
	return err
}

// Sweep publishes runs recorded more than age ago that were never
// published, and marks them published. It returns how many it published.
func Sweep(ctx context.Context, st *store.Store, pub *queue.Publisher, age time.Duration) (int, error) {
	runs, err := st.RunListUnpublished(ctx, st.Pool, store.RunListUnpublishedParams{OlderThan: time.Now().Add(-age), Limit: 1000})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range runs {
		env := queue.Envelope{MessageID: r.MessageID, RunNo: r.RunNo, BatchID: r.BatchID, SchemaID: r.SchemaID}
		if _, err := pub.Publish(ctx, r.DedupID, env); err != nil {
			return n, err
		}
		if err := st.RunMarkPublished(ctx, st.Pool, store.RunMarkPublishedParams{MessageID: r.MessageID, RunNo: r.RunNo}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
