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
