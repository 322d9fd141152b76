package main

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/store"
)

// services are what both modes ingest into: the store, and the NATS
// connection its publisher uses.
type services struct {
	st *store.Store
	nc *nats.Conn
	js jetstream.JetStream
}

// connect opens the store, waiting up to ingest.DBRetryTime for Postgres
// as a line's write does, connects to NATS as name, waiting up to
// cfg.NATS.RetryTime as a line's publish does, and makes sure of the
// stream of cfg (cmdconfig). The error names the step that failed, but a
// database not migrated, whose error names the command that migrates it.
func connect(ctx context.Context, env startup.Env, name string, cfg *config.Config, log *zap.Logger) (*services, error) {
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{Wait: ingest.DBRetryTime, Command: "ingest", Budget: cfg.Postgres})
	if err != nil {
		if step, cause := cmdconfig.Step(err); step == cmdconfig.StepCheckStore {
			return nil, cause
		}
		return nil, err
	}
	// NATS is waited for as long as a line's publish waits for it.
	nc, js, err := cmdconfig.ConnectNATS(ctx, env, cfg.NATS, name, log, cfg.NATS.RetryTime)
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := cmdconfig.EnsureStream(ctx, log, js, cfg.NATS); err != nil {
		nc.Close()
		st.Close()
		return nil, err
	}
	return &services{st: st, nc: nc, js: js}, nil
}

// Close closes the connection, then the store.
func (s *services) Close() {
	s.nc.Close()
	s.st.Close()
}
