package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("UnreachableNamesHost", func(t *testing.T) {
		t.Parallel()
		// Port 1 refuses at once; Open retries until ctx is done.
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := store.Open(ctx, "postgres://postgres@127.0.0.1:1/extractq?sslmode=disable&connect_timeout=1", nil)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1/extractq") {
			t.Fatalf("err = %v, want one naming the server", err)
		}
	})

	t.Run("UnknownDatabaseFailsFast", func(t *testing.T) {
		t.Parallel()
		url := strings.Replace(storetest.BaseURL(), "/extractq_test", "/extractq_no_such_db", 1)
		start := time.Now()
		_, err := store.Open(t.Context(), url, nil)
		if err == nil || !strings.Contains(err.Error(), "extractq_no_such_db") {
			t.Fatalf("err = %v, want one naming the database", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v; an unknown database is not worth retrying", d)
		}
	})

	t.Run("UnmigratedSaysMigrate", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// A schema of its own: the test migrates it down.
		st := storetest.NewStore(t)
		all, err := store.MigrateStatus(ctx, st.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for range all {
			if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.RequireMigrated(ctx); err == nil || !strings.Contains(err.Error(), "migration 0 of") || !strings.Contains(err.Error(), "cmd/migrate up") {
			t.Errorf("RequireMigrated after down = %v, want one naming the version and the command", err)
		}
		err = st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "b1", SchemaID: "support_ticket"})
		if err == nil || !strings.Contains(err.Error(), "go run ./cmd/migrate up") || !strings.Contains(err.Error(), "batches") {
			t.Fatalf("err = %v, want one naming the missing table and the migrate command", err)
		}
	})

	t.Run("InTxCommits", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// A schema of its own: InTx begins and commits on the pool.
		st := storetest.NewStore(t)
		if err := st.RequireMigrated(ctx); err != nil {
			t.Errorf("RequireMigrated on a migrated database: %v", err)
		}
		err := st.InTx(ctx, func(tx store.DBTX) error {
			return st.BatchInsert(ctx, tx, store.BatchInsertParams{ID: "b1", SchemaID: "support_ticket"})
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.BatchSummary(ctx, st.Pool, "b1"); err != nil {
			t.Fatalf("batch not committed: %v", err)
		}
		if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "b2"}); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("batch without schema: err = %v, want a params error", err)
		}
	})
}
