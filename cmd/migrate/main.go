// Command migrate applies or rolls back the product's database migrations.
//
// Usage:
//
//	migrate [up|down|status|results-off]
//
// up (the default) applies every pending migration; down rolls back the
// latest one; status lists each migration and whether it is applied;
// results-off turns the results stream's outbox off for every command
// (a worker's start only turns it on: docs/results-stream.md). The
// database is DATABASE_URL (default startup.DefaultDatabaseURL); it is
// created if missing.
package main

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/store"
)

func main() {
	cmd := "up"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	if len(os.Args) > 2 || (cmd != "up" && cmd != "down" && cmd != "status" && cmd != "results-off") {
		fmt.Fprintln(os.Stderr, "usage: migrate [up|down|status|results-off]  (database: DATABASE_URL)")
		os.Exit(2)
	}
	ctx, stop := startup.Context()
	defer stop()
	log, err := startup.NewLogger("migrate", startup.GetEnv("LOG_LEVEL", "info"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(2)
	}
	defer func() { _ = log.Sync() }()

	if err := run(ctx, cmd, startup.ReadEnv().DatabaseURL, log); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd, url string, log *zap.Logger) error {
	st, err := cmdconfig.OpenStore(ctx, startup.Env{DatabaseURL: url}, log, cmdconfig.StoreOptions{Create: true, Unmigrated: true})
	if err != nil {
		_, err := cmdconfig.Step(err)
		return err
	}
	defer st.Close()
	switch cmd {
	case "down":
		return store.MigrateDown(ctx, st.Pool, log)
	case "results-off":
		if err := st.ResultsOutboxEnable(ctx, st.Pool, false); err != nil {
			return err
		}
		log.Info("results stream's outbox off: no command writes changes to it until a worker with results.enabled true starts")
		return nil
	case "status":
		list, err := store.MigrateStatus(ctx, st.Pool)
		for _, m := range list {
			state, at := "pending", ""
			if m.Applied {
				state, at = "applied", m.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
			}
			fmt.Printf("%-8s %-30s %s\n", state, m.Name, at)
		}
		return err
	default:
		return store.Migrate(ctx, st.Pool, log)
	}
}
