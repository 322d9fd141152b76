package cmdconfig

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
)

// ResultsSwitch applies results.enabled to the deployment's outbox switch
// (results_outbox_state, which every command writing a change reads:
// store.ResultsOutboxEnable). A start only turns the switch on: with
// results.enabled true it turns it on; with results.enabled false on a
// database whose switch is on it returns an error and changes nothing,
// since turning it off would stop the outbox of every worker (batches
// would finish with no events and no batch.done). The switch is turned
// off on purpose with `migrate results-off` (docs/results-stream.md).
//
// Postgres unreachable for a while (store.Transient: restarting, a pooler
// dropping its connections) is waited out for up to StartupRetryTime, as
// OpenStore waits: a worker restarted beside a restarting Postgres starts
// once it is back instead of exiting.
func ResultsSwitch(ctx context.Context, cfg config.Config, st *store.Store) error {
	return store.Retry(ctx, StartupRetryTime, func() error { return resultsSwitch(ctx, cfg, st) })
}

func resultsSwitch(ctx context.Context, cfg config.Config, st *store.Store) error {
	if cfg.Results.Enabled {
		return st.ResultsOutboxEnable(ctx, st.Pool, true)
	}
	state, err := st.ResultsOutboxStateGet(ctx, st.Pool)
	if err != nil {
		return err
	}
	if state.Enabled {
		return fmt.Errorf("results.enabled is false but this database's results stream is on (results_outbox_state.enabled, " +
			"turned on by a worker with results.enabled true): set results.enabled: true, or turn the stream off " +
			"for every command on purpose with `migrate results-off` (docs/results-stream.md)")
	}
	return nil
}

// ResultsRelay applies results.enabled to the deployment (ResultsSwitch;
// its error when the configuration would turn the stream off) and, when
// it is on, makes the results stream and returns the relay that publishes
// the outbox, its metrics registered on reg; nil when it is off.
func ResultsRelay(ctx context.Context, cfg config.Config, st *store.Store, js jetstream.JetStream, reg prometheus.Registerer, log *zap.Logger) (*relay.Results, error) {
	if err := ResultsSwitch(ctx, cfg, st); err != nil {
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
