// Command worker consumes run messages from the stream and extracts each
// with the LLM: extract, validate, repair once, validate, then writes the
// outcome to Postgres in one transaction and acks after the commit.
//
// Usage:
//
//	worker [-config FILE] [-concurrency N] [-health-addr ADDR] [-log-level LEVEL]
//
// Connections come from DATABASE_URL, NATS_URL, LLM_BASE_URL, LLM_API_KEY
// and LLM_MODEL; everything else from the configuration file.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/worker"
)

func main() {
	env := startup.ReadEnv()
	configPath := flag.String("config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	concurrency := flag.Int("concurrency", 0, "messages in flight (default: worker.concurrency of the configuration)")
	healthAddr := flag.String("health-addr", startup.GetEnv("HEALTH_ADDR", "127.0.0.1:9090"), "address of /healthz, /readyz and /metrics; empty for none")
	pprofOn := flag.Bool("pprof", false, "serve Go's profiles on /debug/pprof/ at -health-addr (keep that address private)")
	logLevel := flag.String("log-level", startup.GetEnv("LOG_LEVEL", "info"), "debug, info, warn or error")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file until the worker stops (go tool pprof)")
	flag.Parse()
	// Catch SIGTERM first, so a worker stopped while it starts exits
	// cleanly instead of dying of the signal.
	ctx, stop := startup.Context()
	defer stop()

	log, err := startup.NewLogger("worker", *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	cfg, err := startup.LoadConfig(*configPath, env)
	if err != nil {
		cmdconfig.Fatal(log, "loading configuration", err)
	}
	if *concurrency > 0 {
		cfg.Worker.Concurrency = *concurrency
	}
	gc := startup.SetGC(cfg.Worker.GCPercent, cfg.Worker.MemoryLimitMB)
	log.Info("starting worker", append(env.Redacted(), zap.Int("gc_percent", gc.Percent), zap.Int64("memory_limit_bytes", gc.LimitBytes),
		zap.Bool("gc_from_env", gc.PercentFromEnv || gc.LimitFromEnv), zap.String("model", cfg.LLM.Model), zap.String("provider", cfg.LLM.Provider),
		zap.Int("concurrency", cfg.Worker.Concurrency), zap.String("stream", cfg.NATS.Stream),
		zap.String("consumer", cfg.NATS.Consumer))...)

	stopProfile, err := startup.StartCPUProfile(*cpuProfile)
	if err != nil {
		cmdconfig.Fatal(log, "starting the CPU profile", err)
	}
	defer func() {
		if err := stopProfile(); err != nil {
			log.Error("writing the CPU profile", zap.Error(err))
		}
	}()

	schemas, err := worker.LoadSchemas(cfg)
	if err != nil {
		cmdconfig.FatalUnlessStopped(ctx, log, "loading schemas", err)
	}
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{Wait: store.StartupRetryTime, Command: "worker", Budget: cfg.Postgres})
	if err != nil {
		step, err := cmdconfig.Step(err)
		cmdconfig.FatalUnlessStopped(ctx, log, step, err)
	}
	defer st.Close()
	nc, js, err := cmdconfig.ConnectNATS(ctx, env, cfg.NATS, "extractq-worker", log, 0)
	if err != nil {
		step, err := cmdconfig.Step(err)
		cmdconfig.FatalUnlessStopped(ctx, log, step, err)
	}
	defer nc.Close()
	var cons, dead jetstream.Consumer
	err = cmdconfig.RetryStartup(ctx, log, "creating the stream and consumers", func() error {
		if _, err := queue.EnsureStream(ctx, js, cfg.NATS); err != nil {
			return err
		}
		var err error
		if cons, err = queue.EnsureConsumer(ctx, js, cfg.NATS, cfg.Worker); err != nil {
			return err
		}
		dead, err = queue.EnsureDeadLetter(ctx, js, cfg.NATS)
		return err
	})
	if err != nil {
		cmdconfig.FatalUnlessStopped(ctx, log, "creating the stream and consumers", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	extractor, transport := cmdconfig.NewExtractor(cfg, env, reg, log)
	stopShare, err := cmdconfig.ShareLimit(ctx, cfg, nc, js, transport, log)
	if err != nil {
		cmdconfig.FatalUnlessStopped(ctx, log, "sharing the provider limit", err)
	}
	defer stopShare()
	for _, e := range schemas {
		extractor.Prepare(e.Schema) // logs what strict mode drops from each schema
	}
	w, err := worker.New(worker.Config{
		Store: st, Extractor: extractor, Schemas: schemas, Model: cfg.LLM.Model,
		DBTimeout: min(cfg.Worker.AckWait/2, 15e9), LeaseTTL: cfg.Worker.AckWait, Metrics: worker.NewMetrics(reg), Logger: log,
		CommitBatch: cfg.Worker.CommitBatch, CommitWait: cfg.Worker.CommitWait,
		Announcer: queue.NewAnnouncer(nc, cfg.NATS), Breaker: transport,
	})
	if err != nil {
		cmdconfig.FatalUnlessStopped(ctx, log, "building worker", err)
	}
	pub := queue.NewPublisher(js, cfg.NATS)
	rel, err := relay.New(relay.Config{Store: st, Publisher: pub, Metrics: relay.NewMetrics(reg), Logger: log})
	if err != nil {
		cmdconfig.FatalUnlessStopped(ctx, log, "building the relay", err)
	}
	err = worker.RunService(ctx, worker.ServiceConfig{
		Worker: w, Store: st, Conn: nc, Consumer: cons, Publisher: pub, Relay: rel,
		SweepEvery: cfg.Relay.SweepEvery, SweepAge: cfg.Relay.SweepAge,
		ReconcileEvery: cfg.Relay.ReconcileEvery, ReconcileGrace: cfg.Relay.ReconcileGrace,
		JS: js, NATS: cfg.NATS, DeadLetter: dead,
		Concurrency: cfg.Worker.Concurrency, InProgressEvery: cfg.Worker.InProgressEvery, ShutdownGrace: cfg.Worker.ShutdownGrace,
		TermWithReason: queue.TermReasonSupported(nc), HealthAddr: *healthAddr, Gatherer: reg, Pprof: *pprofOn, Logger: log,
	})
	if err != nil {
		cmdconfig.Fatal(log, "worker stopped", err)
	}
	log.Info("worker stopped")
}
