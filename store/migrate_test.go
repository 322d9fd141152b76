package store_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/migrations"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestMigrate(t *testing.T) {
	t.Parallel()

	tableExists := func(ctx context.Context, t *testing.T, st *store.Store, name string) bool {
		t.Helper()
		var ok bool
		if err := st.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	t.Run("DownThenUp", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// A schema of its own: the test migrates it down and up.
		st := storetest.NewStore(t)
		all, err := store.MigrateStatus(ctx, st.Pool)
		if err != nil || len(all) < 2 {
			t.Fatalf("status = %+v, %v", all, err)
		}
		for range all {
			if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
				t.Fatal(err)
			}
		}
		if tableExists(ctx, t, st, "messages") {
			t.Fatal("messages still exists after down")
		}
		status, err := store.MigrateStatus(ctx, st.Pool)
		if err != nil || len(status) == 0 || status[0].Applied {
			t.Fatalf("status after down = %+v, %v", status, err)
		}
		if err := store.MigrateDown(ctx, st.Pool, nil); err == nil {
			t.Error("down with nothing applied: no error")
		}
		if err := store.Migrate(ctx, st.Pool, nil); err != nil {
			t.Fatal(err)
		}
		if !tableExists(ctx, t, st, "failure_events") || !tableExists(ctx, t, st, "failing_fields") {
			t.Fatal("tables missing after up")
		}
		status, err = store.MigrateStatus(ctx, st.Pool)
		if err != nil || status[0].Name != "000001_core" || !status[0].Applied || status[0].AppliedAt.IsZero() {
			t.Fatalf("status after up = %+v, %v", status, err)
		}
		// Up again is a no-op.
		if err := store.Migrate(ctx, st.Pool, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LandsInTheTestSchema", func(t *testing.T) {
		t.Parallel()
		if os.Getenv("TEST_PGBOUNCER") == "1" {
			t.Skip("through PgBouncer each test has a database of its own, not a schema")
		}
		ctx := t.Context()
		// NewStore itself is under test, with SchemaURL from a new connection.
		st := storetest.NewStore(t)
		var schema string
		if err := st.Pool.QueryRow(ctx, `SELECT schemaname FROM pg_tables WHERE tablename = 'goose_db_version' AND schemaname = current_schema()`).Scan(&schema); err != nil {
			t.Fatalf("goose_db_version not in the current schema: %v", err)
		}
		if !strings.HasPrefix(schema, "t_") {
			t.Errorf("schema = %q", schema)
		}

		// SchemaURL reaches the same schema from a new connection.
		conn, err := pgx.Connect(ctx, storetest.SchemaURL(t, st))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var current string
		if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&current); err != nil {
			t.Fatal(err)
		}
		if current != schema {
			t.Errorf("SchemaURL schema = %q, want %q", current, schema)
		}
	})
}

func TestReadMigrations(t *testing.T) {
	t.Parallel()

	files, err := store.ReadMigrations(migrations.FS)
	if err != nil {
		t.Fatalf("embedded migrations: %v", err)
	}
	if len(files) == 0 || files[0].Version != 1 || files[0].Name != "000001_core" {
		t.Fatalf("embedded migrations = %+v", files)
	}
	for i := 1; i < len(files); i++ {
		if files[i].Version <= files[i-1].Version {
			t.Errorf("versions out of order: %d after %d", files[i].Version, files[i-1].Version)
		}
	}

	sql := &fstest.MapFile{Data: []byte("SELECT 1;")}
	bad := map[string]fstest.MapFS{
		"DuplicateNumber": {"000001_a.up.sql": sql, "000001_a.down.sql": sql, "000001_b.up.sql": sql, "000001_b.down.sql": sql},
		"MissingDown":     {"000001_a.up.sql": sql},
		"NoNumber":        {"core.up.sql": sql, "core.down.sql": sql},
		"ZeroVersion":     {"000000_a.up.sql": sql, "000000_a.down.sql": sql},
		"NotUpOrDown":     {"000001_a.sql": sql},
		"EmptyUp":         {"000001_a.up.sql": {Data: []byte(" \n")}, "000001_a.down.sql": sql},
	}
	for name, fsys := range bad {
		if _, err := store.ReadMigrations(fsys); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Test packages run in parallel processes, and on a fresh machine each may
// find the test database missing and create it at the same moment.
func TestEnsureDatabaseConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(storetest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	name := "extractq_ensure_" + strings.ReplaceAll(strconv.FormatInt(time.Now().UnixNano(), 36), "-", "")
	url := strings.Replace(storetest.BaseURL(), "/"+cfg.Database, "/"+name, 1)
	admin := strings.Replace(storetest.BaseURL(), "/"+cfg.Database, "/postgres", 1)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Error(err)
		}
	})

	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() { errs <- store.EnsureDatabase(ctx, url) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent EnsureDatabase: %v", err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("database %s not there after EnsureDatabase: %v", name, err)
	}
	conn.Close(ctx)
}
