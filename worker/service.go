package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
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
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
)

// ServiceConfig configures RunService.
type ServiceConfig struct {
	Worker   *Worker
	Store    *store.Store
	Conn     *nats.Conn
	Consumer jetstream.Consumer
	// Consumers are more consumers this worker reads, each with a consume
	// loop of its own (Concurrency runs each): a worker of nats.consumers
	// per_schema without worker.schema reads every schema's
	// (queue.EnsureConsumers). Consumer, if set, is read first.
	Consumers []jetstream.Consumer
	// AllConsumers are every workers' consumer of the configured mode
	// (config.Config.Consumers), other pools' included: the reconciler
	// makes a missing one again (with the settings of this worker's
	// first, under its own name and filter) and looks for the runs each
	// gave up on, and the dead-letter stream captures each one's
	// max-deliveries advisories. Default: the shared consumer, NATS.Consumer.
	AllConsumers []config.ConsumerSpec
	// JS, NATS and DeadLetter, when set, run the consumer of the
	// max-deliveries advisories (queue.EnsureDeadLetter): runs that ran out
	// of deliveries go to triage as kind delivery.
	JS         jetstream.JetStream
	NATS       config.NATS
	DeadLetter jetstream.Consumer
	// Ready gates fetching (see queue.ConsumerOptions.Ready). Default
	// Worker.Ready.
	Ready func(ctx context.Context) (queue.Admit, error)
	// Publisher publishes, through Relay, the sweeper's and the
	// reconciler's runs and the worker's requeues (queue.Requeue): without
	// it, a run the provider failed is nak'ed and spends one of its
	// deliveries, and nothing is swept or reconciled.
	Publisher *queue.Publisher
	// Relay, if set, is the relay of Store and Publisher (with its
	// metrics); default one without metrics.
	Relay *relay.Relay
	// Results, if set, publishes the results outbox beside the consumer
	// (relay.Results.Run with ResultsOptions).
	Results        *relay.Results
	ResultsOptions relay.ResultsOptions
	// Consumer options: see queue.ConsumerOptions.
	Concurrency     int
	InProgressEvery time.Duration
	ShutdownGrace   time.Duration
	PanicDelay      time.Duration
	TermWithReason  bool
	// SuspectWait: see queue.ConsumerOptions.SuspectWait.
	SuspectWait time.Duration
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
	// ReconcileEvery is how often the reconciler looks for queued runs the
	// stream no longer holds (relay.Reconcile). Default 1m; negative means
	// never.
	ReconcileEvery time.Duration
	// ReconcileGrace is how long a queued run's copy may go unchecked
	// before the reconciler looks for it. Default 5m.
	ReconcileGrace time.Duration
	Logger         *zap.Logger
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
	consumers := cfg.Consumers
	if cfg.Consumer != nil {
		consumers = append([]jetstream.Consumer{cfg.Consumer}, consumers...)
	}
	if len(consumers) == 0 {
		return errors.New("worker.RunService: no consumer to read")
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
			missing := missingConsumer(rctx, consumers)
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
			case missing != "":
				// Deleted under the worker (nats consumer rm, a switch of
				// nats.consumers): it pulls nothing until it is made again.
				http.Error(w, "consumer "+missing+" does not exist", http.StatusServiceUnavailable)
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
	if cfg.Relay == nil && cfg.Publisher != nil {
		r, err := relay.New(relay.Config{Store: cfg.Store, Publisher: cfg.Publisher, Logger: log})
		if err != nil {
			return err
		}
		cfg.Relay = r
	}
	if rel := cfg.Relay; rel != nil {
		o := relay.Options{SweepEvery: cfg.SweepEvery, SweepAge: cfg.SweepAge,
			ReconcileEvery: cfg.ReconcileEvery, ReconcileGrace: cfg.ReconcileGrace, Recreate: cfg.recreate(consumers),
			Consumers: cfg.AllConsumers}
		if cfg.Worker != nil {
			o.GivenUp = cfg.Worker.DeliveryFailed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel.Run(ctx, o)
		}()
	}

	if res := cfg.Results; res != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.Run(ctx, cfg.ResultsOptions)
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
	opts := queue.ConsumerOptions{
		Concurrency: cfg.Concurrency, InProgressEvery: cfg.InProgressEvery, ShutdownGrace: cfg.ShutdownGrace,
		PanicDelay: cfg.PanicDelay, TermWithReason: cfg.TermWithReason, Ready: cfg.Ready, Publisher: cfg.Publisher,
		OnInProgress: cfg.Worker.extendLease, Log: log,
		// One for all the consumers read: a redelivered run runs with
		// nothing in flight on any of them.
		Isolation: queue.NewIsolation(), SuspectWait: cfg.SuspectWait, OnSuspect: cfg.Worker.cfg.Metrics.suspectRun,
	}
	if cfg.Relay != nil {
		opts.Requeuer = cfg.Relay
	}
	errs := make([]error, len(consumers))
	var runs sync.WaitGroup
	for i, cons := range consumers {
		runs.Go(func() { errs[i] = queue.Run(ctx, cons, cfg.Worker.Handle, opts) })
	}
	runs.Wait()
	err := errors.Join(errs...)
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

// missingConsumer returns the name of the first of consumers the server
// says does not exist, or "". Other failures to ask are not reported here
// (a disconnection is /readyz's own case).
func missingConsumer(ctx context.Context, consumers []jetstream.Consumer) string {
	for _, c := range consumers {
		if _, err := c.Info(ctx); queue.IsConsumerNotFound(err) {
			if info := c.CachedInfo(); info != nil {
				return info.Name
			}
			return "(unnamed)"
		}
	}
	return ""
}

// recreate returns what the reconciler calls when the runs stream is gone
// (its server lost its store) or lacks a workers' consumer: create the
// stream again, each consumer the worker reads with the configuration it
// had, every other of AllConsumers with the first one's configuration
// under its own name and filter, and the dead-letter stream and consumer.
// The worker's consumer handles name their consumers, so they work again
// once these exist. Nil without JS.
func (cfg ServiceConfig) recreate(consumers []jetstream.Consumer) func(ctx context.Context) error {
	if cfg.JS == nil {
		return nil
	}
	var configs []jetstream.ConsumerConfig
	for _, c := range consumers {
		if info := c.CachedInfo(); info != nil {
			configs = append(configs, info.Config)
		}
	}
	if len(configs) == 0 {
		return nil
	}
	for _, spec := range cfg.AllConsumers {
		if slices.ContainsFunc(configs, func(c jetstream.ConsumerConfig) bool { return c.Durable == spec.Name }) {
			continue
		}
		c := configs[0]
		c.Durable, c.Name, c.FilterSubject, c.FilterSubjects = spec.Name, "", spec.Filter, nil
		c.Description = "extractq workers of schema " + spec.SchemaID
		configs = append(configs, c)
	}
	return func(ctx context.Context) error {
		if _, err := queue.EnsureStream(ctx, cfg.JS, cfg.NATS); err != nil {
			return err
		}
		for _, c := range configs {
			if _, err := cfg.JS.CreateOrUpdateConsumer(ctx, cfg.NATS.Stream, c); err != nil {
				return fmt.Errorf("recreating consumer %q: %w", c.Durable, err)
			}
		}
		if cfg.DeadLetter != nil {
			if _, err := queue.EnsureDeadLetter(ctx, cfg.JS, cfg.NATS, cfg.AllConsumers...); err != nil {
				return err
			}
		}
		return nil
	}
}
