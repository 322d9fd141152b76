package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/store"
)

func TestTestTx(t *testing.T) {
	t.Parallel()

	currentSchema := func(ctx context.Context, t *testing.T, db store.DBTX) string {
		t.Helper()
		var schema string
		if err := db.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
		return schema
	}

	t.Run("SharesOneMigratedSchema", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, tx1 := TestTx(ctx, t)
		_, tx2 := TestTx(ctx, t)
		s1, s2 := currentSchema(ctx, t, tx1), currentSchema(ctx, t, tx2)
		if s1 != s2 || !strings.HasPrefix(s1, txSchemaPrefix) {
			t.Fatalf("schemas %q and %q, want one tx_ schema", s1, s2)
		}
		var pending int
		err := tx1.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied`).Scan(&pending)
		if err != nil || pending == 0 {
			t.Fatalf("applied migrations in %s: %d, %v", s1, pending, err)
		}
	})

	t.Run("TransactionsDoNotSeeEachOther", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st, tx1 := TestTx(ctx, t)
		_, tx2 := TestTx(ctx, t)
		id := "storetest-" + randomHex(4)
		if err := st.BatchInsert(ctx, tx1, store.BatchInsertParams{ID: id, SchemaID: "s"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.BatchSummary(ctx, tx1, id); err != nil {
			t.Fatalf("own batch: %v", err)
		}
		if _, err := st.BatchSummary(ctx, tx2, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the other transaction's batch: %v, want ErrNotFound", err)
		}
	})

	t.Run("RollsBackWhenTheTestEnds", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		id := "storetest-" + randomHex(4)
		var ended pgx.Tx
		t.Run("Writes", func(t *testing.T) {
			st, tx := TestTx(t.Context(), t)
			if err := st.BatchInsert(t.Context(), tx, store.BatchInsertParams{ID: id, SchemaID: "s"}); err != nil {
				t.Fatal(err)
			}
			ended = tx
		})
		if _, err := ended.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("transaction of an ended test: %v, want pgx.ErrTxClosed", err)
		}
		st, tx := TestTx(ctx, t)
		if _, err := st.BatchSummary(ctx, tx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("batch of an ended test: %v, want ErrNotFound (rolled back)", err)
		}
	})

	t.Run("StoreHasNoPool", func(t *testing.T) {
		t.Parallel()
		st, _ := TestTx(t.Context(), t)
		if st.Pool != nil {
			t.Fatal("TestTx's store has a pool: a test could commit into the shared schema")
		}
	})
}

// TestDropExpiredTxSchemas: a tx_ schema older than the cutoff is dropped,
// a younger one (another test binary's, still running) is kept.
func TestDropExpiredTxSchemas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	base := BaseURL()
	if err := ensureDatabase(ctx, base); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := fmt.Sprintf("%s%d_%s", txSchemaPrefix, now.Add(-2*txSchemaExpiry).Unix(), randomHex(4))
	live := fmt.Sprintf("%s%d_%s", txSchemaPrefix, now.Unix(), randomHex(4))
	for _, s := range []string{old, live} {
		if err := adminExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = adminExec(context.WithoutCancel(ctx), base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize())
		})
	}
	dropExpiredTxSchemas(ctx, t, base, now.Add(-txSchemaExpiry))

	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for s, want := range map[string]bool{old: false, live: true} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("schema %s exists = %v, want %v", s, exists, want)
		}
	}
}
