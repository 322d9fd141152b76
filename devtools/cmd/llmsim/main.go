// Command llmsim runs the extractq LLM simulator, a test double standing
// in for an OpenAI-compatible chat completions server: it fills the
// requested JSON Schema from the customer message with simple heuristics
// and injects faults at seeded rates. It is not a model. See package
// devtools/llmsim.
//
// Usage:
//
//	llmsim [-config file] [-addr host:port] [-seed n]
//
// The configuration file comes from -config, else the CONFIG environment
// variable, else the embedded defaults; its "simulator" section holds the
// rates, latency and enforced limits. POST /admin/outage?seconds=N and GET
// /admin/stats are unauthenticated test endpoints: never expose the
// simulator beyond a test network. SIGINT or SIGTERM shuts it down
// gracefully.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/internal/startup"
)

func main() {
	configPath := flag.String("config", os.Getenv("CONFIG"), "configuration file (default: $CONFIG, else the embedded defaults)")
	addr := flag.String("addr", "", "listen address (default: simulator.addr)")
	seed := flag.Int64("seed", 0, "fault seed (default: simulator.seed)")
	pprofAddr := flag.String("pprof-addr", "", "serve Go's profiles on /debug/pprof/ at this address (default: off)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file until the simulator stops (go tool pprof)")
	flag.Parse()
	if *pprofAddr != "" {
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }() // DefaultServeMux has net/http/pprof
	}

	log, err := startup.NewLogger("llmsim", cmp.Or(os.Getenv("LOG_LEVEL"), "info"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmsim:", err)
		os.Exit(1)
	}
	defer func() { _ = log.Sync() }()

	cfg, err := config.Load(*configPath)
	if err != nil {
		log.Fatal("load config", zap.Error(err))
	}
	sim := cfg.Simulator
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "addr":
			sim.Addr = *addr
		case "seed":
			sim.Seed = *seed
		}
	})
	log.Info("extractq LLM simulator — not a model",
		zap.String("config", *configPath), zap.String("profile", sim.Profile), zap.String("addr", sim.Addr), zap.Int64("seed", sim.Seed),
		zap.Float64("invalid_json_rate", sim.InvalidJSONRate), zap.Float64("fenced_rate", sim.FencedRate),
		zap.Float64("prose_rate", sim.ProseRate), zap.Float64("wrong_type_rate", sim.WrongTypeRate),
		zap.Float64("missing_required_rate", sim.MissingRequiredRate), zap.Float64("wrong_enum_rate", sim.WrongEnumRate),
		zap.Float64("ungrounded_rate", sim.UngroundedRate), zap.Float64("several_tool_calls_rate", sim.SeveralToolCallsRate),
		zap.Float64("truncated_rate", sim.TruncatedRate), zap.Float64("repair_fix_rate", sim.RepairFixRate),
		zap.Duration("latency", sim.Latency), zap.Duration("latency_median", sim.LatencyMedian),
		zap.Duration("latency_p99", sim.LatencyP99), zap.Float64("rate_limited_rate", sim.RateLimitedRate),
		zap.Float64("server_error_rate", sim.ServerErrorRate), zap.Float64("forbidden_html_rate", sim.ForbiddenHTMLRate),
		zap.Duration("retry_after", sim.RetryAfter), zap.Int("requests_per_minute", sim.RequestsPerMinute),
		zap.Int("tokens_per_minute", sim.TokensPerMinute), zap.Float64("refusal_rate", sim.RefusalRate),
		zap.Float64("content_filter_rate", sim.ContentFilterRate), zap.Bool("reasoning", sim.Reasoning))

	stopProfile, err := startup.StartCPUProfile(*cpuProfile)
	if err != nil {
		log.Fatal("starting the CPU profile", zap.Error(err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = llmsim.New(sim, log).ListenAndServe(ctx, sim.Addr)
	if perr := stopProfile(); perr != nil {
		log.Error("writing the CPU profile", zap.Error(perr))
	}
	if err != nil {
		log.Fatal("llmsim", zap.Error(err))
	}
}
