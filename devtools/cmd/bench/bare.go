package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/worker"
)

// instantChat answers every call at once, in process, with a record that
// is valid for any message: the bare limit's stand-in for the LLM.
type instantChat struct{ reply string }

func (c instantChat) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	return openai.ChatCompletionResponse{
		Choices: []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: c.reply}, FinishReason: "stop"}},
		Usage:   openai.Usage{PromptTokens: 1500, CompletionTokens: 80},
	}, nil
}

// runBareWorker is the bare limit: the worker's own loop (fetch, read the
// run, write the outcome rows in the same transaction pattern, ack after
// commit) with no LLM work.
func runBareWorker(cpuProfile string) error {
	env := startup.ReadEnv()
	log, err := startup.NewLogger("bare-worker", "warn")
	if err != nil {
		return err
	}
	stopProfile, err := startup.StartCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	cfg, err := startup.LoadConfig(env.Config, env)
	if err != nil {
		return err
	}
	ctx, stop := startup.Context()
	defer stop()
	schemas, err := worker.LoadSchemas(cfg)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
		return err
	}
	defer st.Close()
	nc, js, err := queue.Connect(ctx, env.NATSURL, "extractq-bench-bare", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := queue.EnsureConsumers(ctx, js, cfg)
	if err != nil {
		return err
	}
	reply, err := nullRecord(schemas["customer_message"].Schema)
	if err != nil {
		return err
	}
	ext := pipeline.NewExtractor(instantChat{reply: reply}, pipeline.ExtractorConfig{
		Model: cfg.LLM.Model, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens, ContextWindowTokens: cfg.LLM.ContextWindowTokens,
		Budget: pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
	})
	w, err := worker.New(worker.Config{Store: st, Extractor: ext, Schemas: schemas, Model: cfg.LLM.Model,
		CommitBatch: cfg.Worker.CommitBatch, CommitWait: cfg.Worker.CommitWait, Metrics: worker.NewMetrics(prometheus.NewRegistry()), Logger: log})
	if err != nil {
		return err
	}
	return worker.RunService(ctx, worker.ServiceConfig{Worker: w, Store: st, Conn: nc, Consumers: cons, AllConsumers: cfg.Consumers(),
		Concurrency: cfg.Worker.Concurrency, SweepEvery: -1, Logger: log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))})
}

// nullRecord returns a record of s with every property null but the
// first value of each required enum.
func nullRecord(s *pipeline.Schema) (string, error) {
	var doc struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(s.Raw, &doc); err != nil {
		return "", err
	}
	rec := map[string]any{}
	for _, name := range doc.Required {
		rec[name] = nil
		if p := doc.Properties[name]; len(p.Enum) > 0 && p.Enum[0] != nil {
			rec[name] = p.Enum[0]
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("null record: %w", err)
	}
	return string(b), nil
}
