package main

import (
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t) // migrated
	url := storetest.SchemaURL(t, st)
	log := zaptest.NewLogger(t)

	for _, cmd := range []string{"status", "down", "status", "up", "up"} {
		if err := run(ctx, cmd, url, log); err != nil {
			t.Fatalf("migrate %s: %v", cmd, err)
		}
	}
	list, err := store.MigrateStatus(ctx, st.Pool)
	if err != nil || len(list) == 0 || !list[0].Applied {
		t.Fatalf("status = %+v, %v; want applied", list, err)
	}
}

// TestRunResultsOff: `migrate results-off` turns the results stream's
// outbox off for every command.
func TestRunResultsOff(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	if err := st.ResultsOutboxEnable(ctx, st.Pool, true); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, "results-off", storetest.SchemaURL(t, st), zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	if s, err := st.ResultsOutboxStateGet(ctx, st.Pool); err != nil || s.Enabled {
		t.Fatalf("state %+v, %v; want off", s, err)
	}
}
