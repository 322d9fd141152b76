// Package app is the wiring the commands share: environment, logger,
// configuration, and building the store, the stream and the pipeline from
// them. Commands and their command-level code (cmd/ingest) import
// it; library packages do not.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/worker"
)

// Defaults of the connection variables: the local services of the project's
// machines and the LLM simulator.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/extractq?sslmode=disable"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultLLMBaseURL  = "http://127.0.0.1:8089/v1"
)

// Env is the connection settings, read from the environment.
type Env struct {
	DatabaseURL string // DATABASE_URL
	NATSURL     string // NATS_URL
	LLMBaseURL  string // LLM_BASE_URL, an OpenAI-compatible base URL ending in /v1
	LLMAPIKey   string // LLM_API_KEY; never logged
	LLMModel    string // LLM_MODEL; overrides the configuration's llm.model
	Config      string // CONFIG, the configuration file path; empty means the embedded defaults
}

// GetEnv returns the value of the environment variable key, or def.
func GetEnv(key, def string) string {
	return cmp.Or(os.Getenv(key), def)
}

// ReadEnv reads the connection settings.
func ReadEnv() Env {
	return Env{
		DatabaseURL: GetEnv("DATABASE_URL", DefaultDatabaseURL),
		NATSURL:     GetEnv("NATS_URL", DefaultNATSURL),
		LLMBaseURL:  GetEnv("LLM_BASE_URL", DefaultLLMBaseURL),
		LLMAPIKey:   GetEnv("LLM_API_KEY", "simulator"),
		LLMModel:    os.Getenv("LLM_MODEL"),
		Config:      os.Getenv("CONFIG"),
	}
}

// Redacted returns e for logs: URLs without passwords, no API key.
func (e Env) Redacted() []zap.Field {
	return []zap.Field{
		zap.String("database_url", redactURL(e.DatabaseURL)),
		zap.String("nats_url", redactURL(e.NATSURL)),
		zap.String("llm_base_url", redactURL(e.LLMBaseURL)),
		zap.Bool("llm_api_key_set", e.LLMAPIKey != ""),
		zap.String("config", cmp.Or(e.Config, "(embedded defaults)")),
	}
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// NewLogger returns a production zap logger writing JSON to stderr at
// level ("debug", "info", "warn", "error"), named for the component.
func NewLogger(component, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(cmp.Or(level, "info"))
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	zc.EncoderConfig.TimeKey = "time"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := zc.Build()
	if err != nil {
		return nil, err
	}
	return log.Named(component), nil
}

// LoadConfig loads the configuration file at path (empty: embedded
// defaults) and applies LLM_MODEL.
func LoadConfig(path string, env Env) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if env.LLMModel != "" {
		cfg.LLM.Model = env.LLMModel
	}
	return cfg, nil
}

// LoadSchemas compiles every configured schema with its prompt.
func LoadSchemas(cfg *config.Config) (map[string]worker.SchemaEntry, error) {
	out := map[string]worker.SchemaEntry{}
	for _, sc := range cfg.Schemas {
		s, err := pipeline.LoadSchema(schemas.FS, sc.ID, sc.File)
		if err != nil {
			return nil, err
		}
		p, err := pipeline.LoadPrompt(sc.Prompt)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", sc.ID, err)
		}
		out[sc.ID] = worker.SchemaEntry{Schema: s, Prompt: p, Repair: sc.Repair}
	}
	return out, nil
}

// NewExtractor builds the pipeline's extractor for the configured model on
// the endpoint env names, calling through a provider.Transport (retries,
// rate limits, circuit breaker; configuration section provider) whose
// metrics are registered on reg (nil: not registered). It returns the
// transport too: its Ready and WaitReady tell when the breaker is open.
func NewExtractor(cfg *config.Config, env Env, reg prometheus.Registerer, log *zap.Logger) (*pipeline.Extractor, *provider.Transport) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = max(cfg.Worker.Concurrency, 2)
	tr := provider.New(cfg.Provider, base, reg, log)
	oc := openai.DefaultConfig(env.LLMAPIKey)
	oc.BaseURL = strings.TrimRight(env.LLMBaseURL, "/")
	oc.HTTPClient = tr.Client()
	price := cfg.Prices.Models[cfg.LLM.Model]
	if _, ok := cfg.Prices.Models[cfg.LLM.Model]; !ok {
		log.Warn("model has no price in the price table; its calls cost 0", zap.String("model", cfg.LLM.Model),
			zap.String("price_version", cfg.Prices.Version))
	}
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
		Model: cfg.LLM.Model, RequestMode: cfg.LLM.RequestMode, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
		ContextWindowTokens: cfg.LLM.ContextWindowTokens, Timeout: cfg.LLM.Timeout,
		Budget:       pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
		Price:        pipeline.Price{InputPerMTok: price.InputPerMTok, CachedInputPerMTok: price.CachedInputPerMTok, OutputPerMTok: price.OutputPerMTok},
		PriceVersion: cfg.Prices.Version,
		Logger:       log,
	})
	return ext, tr
}

// Fatal logs err (without a stack trace: the error says where), writes
// it as one plain line on stderr for the person who started the command,
// and exits 1.
func Fatal(log *zap.Logger, msg string, err error) {
	log.WithOptions(zap.AddStacktrace(zap.FatalLevel)).Error(msg, zap.Error(err))
	_ = log.Sync()
	fmt.Fprintf(os.Stderr, "%s: %s: %v\n", filepath.Base(os.Args[0]), msg, err)
	os.Exit(1)
}

// FatalUnlessStopped is Fatal, except that when ctx has ended (SIGINT or
// SIGTERM arrived while the command was starting) it logs that the
// command stopped during start-up and exits 0: a stop asked for is not a
// failure, and nothing was taken from the queue yet.
func FatalUnlessStopped(ctx context.Context, log *zap.Logger, msg string, err error) {
	if ctx.Err() != nil {
		log.Info("stopped while starting", zap.String("step", msg), zap.Error(err))
		_ = log.Sync()
		os.Exit(0)
	}
	Fatal(log, msg, err)
}

// Context returns a context that ends on SIGINT or SIGTERM.
func Context() (context.Context, context.CancelFunc) {
	return signalContext()
}

// RetryStartup runs a start-up step (creating a stream or a consumer) until
// it succeeds, retrying any error with backoff for up to two minutes, so a
// command started while NATS or Postgres restarts waits instead of
// exiting. Each failure is logged with what.
func RetryStartup(ctx context.Context, log *zap.Logger, what string, step func() error) error {
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := step()
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code != 503 && apiErr.Code != 408 {
			// The server refused the request itself (a bad stream setting):
			// waiting will not change its mind.
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(2*time.Minute),
		backoff.WithNotify(func(err error, next time.Duration) {
			log.Warn(what+" failed; retrying", zap.Error(err), zap.Duration("retry_in", next))
		}))
	return err
}
