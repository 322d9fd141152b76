// Package storetest gives tests a store of their own on the test Postgres
// server, as river's riverdbtest does.
//
// Each NewStore makes a fresh schema t_<random hex> in the test database,
// applies the migrations into it, and drops it when the test ends, so
// tests that commit can run in parallel without seeing each other's rows.
//
// The server is TEST_DATABASE_URL, default DefaultURL. The database is
// created if missing.
//
// NewPgBouncer starts a private PgBouncer in transaction pooling in front
// of a new database of that server, for tests of the product through it.
// With TEST_PGBOUNCER=1 set, NewStore too hands out stores through one
// (a new database and PgBouncer per store), so the whole suite can be run
// that way: TEST_PGBOUNCER=1 go test ./...
package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/store"
)

// DefaultURL is the test database when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/extractq_test?sslmode=disable"

// BaseURL returns the test database URL: TEST_DATABASE_URL or DefaultURL.
func BaseURL() string {
	return cmp.Or(os.Getenv("TEST_DATABASE_URL"), DefaultURL)
}

var ensured sync.Map // base URL -> *ensureOnce

type ensureOnce struct {
	once sync.Once
	err  error
}

// ensureBase creates the test database base names if it is missing, once
// per base URL in the test binary.
func ensureBase(ctx context.Context, base string) error {
	v, _ := ensured.LoadOrStore(base, &ensureOnce{})
	e := v.(*ensureOnce)
	e.once.Do(func() { e.err = store.EnsureDatabase(ctx, base) })
	return e.err
}

// NewStore returns a store whose pool works in a new schema of the test
// database (search_path), with the migrations applied there; the goose
// version table lands in the schema too. When the test ends the pool is
// closed and the schema dropped. Logs go to the test log at warn level and
// above. Use SchemaURL to hand the same schema to a subprocess. With
// TEST_PGBOUNCER=1 it returns NewPgBouncer(t).NewStore(t) instead.
func NewStore(t testing.TB) *store.Store {
	t.Helper()
	if os.Getenv("TEST_PGBOUNCER") == "1" {
		return NewPgBouncer(t).NewStore(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := BaseURL()

	if err := ensureBase(ctx, base); err != nil {
		t.Fatalf("storetest: %v", err)
	}

	schema := "t_" + randomHex(8)
	if err := adminExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("storetest: create schema %s: %v", schema, err)
	}
	dropSchema := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("storetest: drop schema %s: %v", schema, err)
		}
	}

	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	st, err := store.Open(ctx, withSearchPath(base, schema), log)
	if err != nil {
		dropSchema()
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		st.Close()
		dropSchema()
	})
	if err := store.Migrate(ctx, st.Pool, log); err != nil {
		t.Fatalf("storetest: migrate schema %s: %v", schema, err)
	}
	return st
}

// SchemaURL returns a database URL that reaches st's schema (it carries
// search_path), or its database through PgBouncer with TEST_PGBOUNCER=1,
// for commands a test starts as subprocesses. st must come from NewStore.
func SchemaURL(t testing.TB, st *store.Store) string {
	t.Helper()
	s := st.Pool.Config().ConnString()
	if !strings.Contains(s, "search_path") && st.Pooler() != store.PoolerTransaction {
		t.Fatalf("storetest.SchemaURL: store was not made by storetest.NewStore")
	}
	return s
}

// withSearchPath adds search_path=schema to a URL or keyword/value
// connection string; pgx sends unknown parameters as session settings.
func withSearchPath(base, schema string) string {
	if u, err := url.Parse(base); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return fmt.Sprintf("%s search_path=%s", base, schema)
}

// adminExec runs one statement on a short connection to the base database.
func adminExec(ctx context.Context, base, sql string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
