package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// ingestFunc ingests file as a batch of schemaID, waits for the worker's
// outcomes, and returns the batch to score.
type ingestFunc func(ctx context.Context, file, schemaID string) (string, error)

// natsIngest returns the ingestFunc of cmd/eval: it connects to NATS
// (NATS_URL) only when called, as cmd/ingest does, and ingests into st.
func natsIngest(env startup.Env, cfg *config.Config, st *store.Store, log *zap.Logger, timeout time.Duration, stderr io.Writer) ingestFunc {
	return func(ctx context.Context, file, schemaID string) (string, error) {
		nc, js, err := cmdconfig.ConnectNATS(ctx, env, cfg.NATS, "extractq-eval", log, cfg.NATS.RetryTime)
		if err != nil {
			return "", err
		}
		defer nc.Close()
		if err := cmdconfig.EnsureStream(ctx, log, js, cfg.NATS); err != nil {
			return "", err
		}
		return ingestAndWait(ctx, st, queue.NewPublisher(js, cfg.NATS), cfg, file, schemaID, timeout, stderr)
	}
}

// ingestAndWait ingests file (JSONL: the labels file is one) as a batch
// of schemaID, as cmd/ingest -wait does, and waits up to timeout for a
// final worker outcome of every run it made or found queued
// (ingest.Wait). It returns the batch recorded or, when every message was
// ingested before (nothing new to extract), the newest batch ingested
// from file.
func ingestAndWait(ctx context.Context, st *store.Store, pub *queue.Publisher, cfg *config.Config, file, schemaID string, timeout time.Duration, stderr io.Writer) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	in, err := ingest.New(ingest.Config{Store: st, Publisher: pub, SchemaID: schemaID, MaxTextBytes: cfg.Ingest.MaxTextBytes,
		SourceName: file, NATSRetryTime: cfg.NATS.RetryTime, MaxErrors: cfg.Ingest.MaxErrors})
	if err != nil {
		return "", err
	}
	sum, err := in.Run(ctx, f)
	if err != nil {
		return "", fmt.Errorf("ingesting %s: %w", file, err)
	}
	fmt.Fprintf(stderr, "eval: ingested %s: %d published, %d already ingested, %d rejected; waiting for the worker\n",
		file, sum.Published, sum.Duplicates, sum.Rejected)
	if !ingest.Wait(ctx, st, sum, ingest.WaitOptions{Timeout: timeout}) {
		return "", fmt.Errorf("no outcome for every message of %s after %v: is a worker running (make demo starts one)?", file, timeout)
	}
	if sum.BatchID != "" {
		return sum.BatchID, nil
	}
	batch, err := st.BatchLatest(ctx, st.Pool, file, schemaID)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%s: no message was ingested (%d lines rejected)", file, sum.Rejected)
	}
	return batch, err
}
