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

// TestNewStoreReusesSchemas: a schema comes back to the next test
// emptied, its identity columns restarted, whether its rows are deleted
// or truncated, unless a test took its migrations down; then it is
// dropped.
func TestNewStoreReusesSchemas(t *testing.T) {
	// Not parallel: no other test may take the schema in between.
	for _, byDelete := range []bool{true, false} {
		emptyByDelete = byDelete
		t.Run(fmt.Sprintf("ByDelete=%v", byDelete), testNewStoreReusesSchemas)
	}
	emptyByDelete = true
}

func testNewStoreReusesSchemas(t *testing.T) {
	currentSchema := func(ctx context.Context, t *testing.T, st *store.Store) string {
		t.Helper()
		var schema string
		if err := st.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
		return schema
	}
	ingest := func(ctx context.Context, t *testing.T, st *store.Store) int64 {
		t.Helper()
		if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "b1", SchemaID: "s"}); err != nil {
			t.Fatal(err)
		}
		res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{
			Source: "src", ExternalID: "m1", Body: "text", ContentHash: []byte{1}, BatchID: "b1", SchemaID: "s"})
		if err != nil {
			t.Fatal(err)
		}
		// The audit log refuses deletes: emptying must get past that too.
		if _, err := st.Pool.Exec(ctx, `INSERT INTO audit_log (actor, via, action, message_id) VALUES ('alice', 'ui', 'approve', $1)`,
			res.Message.ID); err != nil {
			t.Fatal(err)
		}
		return res.Message.ID
	}
	var first string
	var firstID int64
	t.Run("Writes", func(t *testing.T) {
		ctx := t.Context()
		st := NewStore(t)
		first, firstID = currentSchema(ctx, t, st), ingest(ctx, t, st)
		if !strings.HasPrefix(first, schemaPrefix) {
			t.Errorf("schema %q", first)
		}
	})
	t.Run("GetsItEmptied", func(t *testing.T) {
		ctx := t.Context()
		st := NewStore(t)
		if s := currentSchema(ctx, t, st); s != first {
			t.Fatalf("schema %q, want %q again", s, first)
		}
		// The same keys are free again, and ids start over.
		if id := ingest(ctx, t, st); id != firstID {
			t.Errorf("message id %d, want %d (identity restarted)", id, firstID)
		}
		var audit int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&audit); err != nil || audit != 1 {
			t.Errorf("audit entries %d, %v; want only this test's one", audit, err)
		}
		// What the migrations wrote stays: analyst_grant reads it.
		var grants int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM analyst_grants`).Scan(&grants); err != nil || grants == 0 {
			t.Errorf("analyst_grants rows %d, %v; want those migration 000025 wrote", grants, err)
		}
		if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("NotAfterMigrateDown", func(t *testing.T) {
		ctx := t.Context()
		st := NewStore(t)
		if s := currentSchema(ctx, t, st); s == first {
			t.Fatalf("schema %q handed out again after a migration was taken down", s)
		}
		var exists bool
		if err := st.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, first).Scan(&exists); err != nil || exists {
			t.Errorf("schema %s exists = %v, %v; want it dropped", first, exists, err)
		}
		if err := st.RequireMigrated(ctx); err != nil {
			t.Errorf("new schema: %v", err)
		}
	})
}

// TestDropExpiredSchemas: a t_ or tx_ schema older than the cutoff is
// dropped, a younger one (another test binary's, still running) is kept,
// and so is a schema whose name tells no time.
func TestDropExpiredSchemas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	base := BaseURL()
	if err := ensureDatabase(ctx, base); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	named := func(prefix string, at time.Time) string {
		return fmt.Sprintf("%s%d_%s", prefix, at.Unix(), randomHex(4))
	}
	want := map[string]bool{
		named(txSchemaPrefix, now.Add(-2*schemaExpiry)): false,
		named(schemaPrefix, now.Add(-2*schemaExpiry)):   false,
		named(txSchemaPrefix, now):                      true,
		named(schemaPrefix, now):                        true,
		schemaPrefix + randomHex(8):                     true,
	}
	for s := range want {
		if err := adminExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = adminExec(context.WithoutCancel(ctx), base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize())
		})
	}
	dropExpiredSchemas(ctx, t, base, now.Add(-schemaExpiry))

	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for s, want := range want {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("schema %s exists = %v, want %v", s, exists, want)
		}
	}
}
