package cmdconfig

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
)

// ResultsRelay applies results.enabled to the deployment (every command
// writing a change reads it from Postgres: store.ResultsOutboxEnable) and,
// when it is on, makes the results stream and returns the relay that
// publishes the outbox, its metrics registered on reg; nil when it is
// off.
func ResultsRelay(ctx context.Context, cfg config.Config, st *store.Store, js jetstream.JetStream, reg prometheus.Registerer, log *zap.Logger) (*relay.Results, error) {
	if err := st.ResultsOutboxEnable(ctx, st.Pool, cfg.Results.Enabled); err != nil {
		return nil, err
	}
	if !cfg.Results.Enabled {
		return nil, nil
	}
	stream := queue.NewResultsStream(js, cfg.NATS, cfg.Results)
	// A cluster electing its leaders may time out a request: retried, as
	// the runs stream's creation is.
	if err := RetryStartup(ctx, log, "creating the results stream", func() error {
		_, err := stream.Ensure(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	log.Info("results stream on", zap.String("stream", stream.Name()), zap.Bool("include_text", cfg.Results.IncludeText),
		zap.Duration("max_age", cfg.Results.MaxAge))
	return relay.NewResults(relay.ResultsConfig{Store: st, Stream: stream, NATS: cfg.NATS, IncludeText: cfg.Results.IncludeText,
		MaxAge: cfg.Results.MaxAge, Metrics: relay.NewResultsMetrics(reg), Logger: log})
}
