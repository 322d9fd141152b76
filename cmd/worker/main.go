// Command worker consumes run messages from the stream and extracts each
// with the LLM: extract, validate, repair once, validate, then writes the
// outcome to Postgres in one transaction and acks after the commit.
//
// Usage:
//
//	worker [-config FILE] [-concurrency N] [-schema ID] [-health-addr ADDR] [-log-level LEVEL]
//
// Connections come from DATABASE_URL, NATS_URL, LLM_BASE_URL, LLM_API_KEY
// and LLM_MODEL; everything else from the configuration file. With
// nats.consumers per_schema, -schema (or WORKER_SCHEMA, worker.schema)
// makes the worker one of that schema's pool: it reads only that schema's
// consumer.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/config"
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
	schema := flag.String("schema", "", "with nats.consumers per_schema, serve only this schema's consumer (default: WORKER_SCHEMA, else worker.schema)")
	healthAddr := flag.String("health-addr", startup.GetEnv("HEALTH_ADDR", "127.0.0.1:9090"), "address of /healthz, /readyz and /metrics; empty for none")
	pprofOn := flag.Bool("pprof", false, "serve Go's profiles on /debug/pprof/ at -health-addr (keep that address private)")
	logLevel := flag.String("log-level", startup.GetEnv("LOG_LEVEL", "info"), "debug, info, warn or error")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file until the worker stops (go tool pprof)")
	flag.Parse()
	// 0 is the configuration's; a negative was taken as 0, without a word.
	if *concurrency < 0 {
		fmt.Fprintf(os.Stderr, "worker: -concurrency %d: give 1 or more (0, the default, is worker.concurrency of the configuration)\n", *concurrency)
		os.Exit(2)
	}
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
	if *schema != "" {
		cfg.Worker.Schema = *schema
		if err := cfg.Validate(); err != nil {
			cmdconfig.Fatal(log, "the -schema flag", err)
		}
	}
	served := cfg.WorkerConsumers()
	gc := startup.SetGC(cfg.Worker.GCPercent, cfg.Worker.MemoryLimitMB)
	log.Info("starting worker", append(env.Redacted(), zap.Int("gc_percent", gc.Percent), zap.Int64("memory_limit_bytes", gc.LimitBytes),
		zap.Bool("gc_from_env", gc.PercentFromEnv || gc.LimitFromEnv), zap.String("model", cfg.LLM.Model), zap.String("provider", cfg.LLM.Provider),
		zap.Int("concurrency", cfg.Worker.Concurrency), zap.String("stream", cfg.NATS.Stream),
		zap.String("consumers_mode", cfg.NATS.Consumers), zap.Strings("consumers", consumerNames(served)))...)

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
	var cons []jetstream.Consumer
	var dead jetstream.Consumer
	err = cmdconfig.RetryStartup(ctx, log, "creating the stream and consumers", func() error {
		if _, err := queue.EnsureStream(ctx, js, cfg.NATS); err != nil {
			return err
		}
		var err error
		if cons, err = queue.EnsureConsumers(ctx, js, cfg); err != nil {
			return err
		}
		dead, err = queue.EnsureDeadLetter(ctx, js, cfg.NATS, cfg.Consumers()...)
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
		DBTimeout: min(cfg.Worker.AckWait/2, 15e9), LeaseTTL: cfg.Worker.AckWait, Logger: log,
		Metrics:     worker.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"consumer": consumerLabel(served)}, reg)),
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
	results, err := cmdconfig.ResultsRelay(ctx, *cfg, st, js, reg, log)
	if err != nil {
		cmdconfig.FatalUnlessStopped(ctx, log, "setting up the results stream", err)
	}
	err = worker.RunService(ctx, worker.ServiceConfig{
		Results: results, ResultsOptions: relay.ResultsOptions{PublishEvery: cfg.Results.PublishEvery, CheckEvery: cfg.Relay.ReconcileEvery},
		Worker: w, Store: st, Conn: nc, Consumers: cons, AllConsumers: cfg.Consumers(), Publisher: pub, Relay: rel,
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

func consumerNames(specs []config.ConsumerSpec) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}

// consumerLabel is the consumer label of the worker's metrics: the
// consumer it reads, or the names of those it reads joined by "+" (a
// worker of nats.consumers per_schema without worker.schema).
func consumerLabel(specs []config.ConsumerSpec) string {
	return strings.Join(consumerNames(specs), "+")
}
