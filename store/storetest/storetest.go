// Package storetest gives tests a database of their own on the test
// Postgres server, as river's riverdbtest does, in one of two ways.
//
// TestTx is the fast one: a transaction on a schema that the test binary
// migrates once and shares between all its tests, rolled back when the
// test ends. Tests that run in parallel never see each other's rows, as
// none is ever committed. Use it whenever the code under test can run in
// the caller's transaction (every store method takes a store.DBTX).
//
// NewStore is for the rest: code that commits or opens its own
// transactions on the pool, several connections racing each other (FOR
// UPDATE SKIP LOCKED, unique keys), LISTEN, subprocesses, or migrations.
// Each NewStore gives its test a migrated schema of its own, made for it
// or emptied by an earlier test of the same binary.
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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/internal/tcpproxy"
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

// NewStore returns a store whose pool works in a schema of the test
// database of its own (search_path), with the migrations applied there;
// the goose version table lands in the schema too. Logs go to the test log
// at warn level and above. Use SchemaURL to hand the same schema to a
// subprocess.
//
// When the test ends the pool is closed and the schema, if every migration
// is still applied, is emptied (its identity columns restarted) and kept for
// the next NewStore of the test binary, as river's riverdbtest.TestSchema
// does: emptying a schema costs far less than migrating a new one. A
// schema is never in use by two tests at once. One that cannot be emptied,
// or whose migrations a test took down, is dropped. The schemas are named
// t_<unix seconds>_<random hex>; those a test binary leaves at its end are
// dropped by the first NewStore or TestTx of a binary an hour later.
//
// With TEST_PGBOUNCER=1 it returns NewPgBouncer(t).NewStore(t) instead.
func NewStore(t testing.TB) *store.Store {
	t.Helper()
	if os.Getenv("TEST_PGBOUNCER") == "1" {
		return NewPgBouncer(t).NewStore(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := BaseURL()

	if err := ensureDatabase(ctx, base); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	expireSchemas(ctx, t, base)

	schema, reused := idleSchemas.take(base)
	if !reused {
		schema = newSchemaName(schemaPrefix)
		if err := adminExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatalf("storetest: create schema %s: %v", schema, err)
		}
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
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := emptyForReuse(ctx, st)
		st.Close()
		if err != nil {
			t.Logf("storetest: schema %s not kept for reuse: %v", schema, err)
			dropSchema()
			return
		}
		idleSchemas.put(base, schema)
	})
	if reused {
		return st
	}
	if err := store.Migrate(ctx, st.Pool, log); err != nil {
		t.Fatalf("storetest: migrate schema %s: %v", schema, err)
	}
	return st
}

// schemaPrefix starts the names of the schemas NewStore makes.
const schemaPrefix = "t_"

// newSchemaName returns prefix<unix seconds>_<random hex>.
func newSchemaName(prefix string) string {
	return fmt.Sprintf("%s%d_%s", prefix, time.Now().Unix(), randomHex(4))
}

// idleSchemas are the emptied schemas NewStore may hand out again, by
// base URL.
var idleSchemas = schemaSet{m: map[string][]string{}}

type schemaSet struct {
	mu sync.Mutex
	m  map[string][]string
}

func (s *schemaSet) take(base string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.m[base]
	if len(l) == 0 {
		return "", false
	}
	s.m[base] = l[:len(l)-1]
	return l[len(l)-1], true
}

func (s *schemaSet) put(base, schema string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[base] = append(s.m[base], schema)
}

// emptyByDelete says whether emptyForReuse tries deleting before it
// truncates; this package's tests turn it off to see the truncation.
var emptyByDelete = true

// emptyForReuse deletes every row of st's schema, and restarts its
// identity columns, if every migration is applied there; else, or if
// that fails, it returns an error and the schema must be dropped. It
// gives up on a lock held elsewhere (such as by a subprocess still
// connected) after 5s.
//
// Deleting the few rows a test wrote costs far less than TRUNCATE, which
// makes new files for every table, index and sequence (on a machine busy
// with disk writes, a third of a second). So it deletes, with triggers
// off (session_replication_role = replica, which a superuser or a role
// granted SET on it may set) as the foreign keys and the audit log's
// append-only rule would refuse, and truncates where the role may not.
func emptyForReuse(ctx context.Context, st *store.Store) error {
	status, err := store.MigrateStatus(ctx, st.Pool)
	if err != nil {
		return err
	}
	for _, m := range status {
		if !m.Applied {
			return fmt.Errorf("migration %s is not applied", m.Name)
		}
	}
	empty := func(replica bool) error {
		return pgx.BeginFunc(ctx, st.Pool, func(tx pgx.Tx) error {
			if replica {
				if !emptyByDelete {
					return errors.New("deleting is turned off")
				}
				if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
					return err
				}
			}
			// Nothing here needs to outlive a crash of the server: the
			// commit need not wait for the disk.
			_, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'; SET LOCAL synchronous_commit = off;`+
				fmt.Sprintf(emptySchemaSQL, replica))
			return err
		})
	}
	if empty(true) == nil {
		return nil
	}
	return empty(false)
}

// emptySchemaSQL deletes the rows of every table of the current schema but
// those the migrations fill (goose's version table, and analyst_grants of
// migration 000025, which analyst_grant reads) and restarts their identity
// columns when %[1]v is true, and truncates them all when it is false.
const emptySchemaSQL = `
DO $$
DECLARE
    t text;
BEGIN
    IF %[1]v THEN
        FOR t IN SELECT format('%%I', tablename) FROM pg_tables
                 WHERE schemaname = current_schema() AND tablename NOT IN ('goose_db_version', 'analyst_grants') LOOP
            EXECUTE 'DELETE FROM ' || t;
        END LOOP;
        PERFORM setval(pg_get_serial_sequence(format('%%I', c.relname), a.attname), 1, false)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
          AND c.relname NOT IN ('goose_db_version', 'analyst_grants') AND a.attidentity <> '';
    ELSE
        SELECT 'TRUNCATE ' || string_agg(format('%%I', tablename), ', ') || ' RESTART IDENTITY CASCADE' INTO t
        FROM pg_tables WHERE schemaname = current_schema() AND tablename NOT IN ('goose_db_version', 'analyst_grants');
        IF t IS NOT NULL THEN
            EXECUTE t;
        END IF;
    END IF;
END $$`

// ensureDatabase creates the test database at base once per test binary.
func ensureDatabase(ctx context.Context, base string) error {
	v, _ := ensured.LoadOrStore(base, &ensureOnce{})
	e := v.(*ensureOnce)
	e.once.Do(func() { e.err = store.EnsureDatabase(ctx, base) })
	return e.err
}

// TestTx begins a transaction for one test on the schema this test binary
// shares between its TestTx callers, and rolls it back in t.Cleanup (with
// context.WithoutCancel, as t.Context is cancelled by then), as river's
// riverdbtest.TestTxPgx does. The first call makes the schema,
// tx_<unix seconds>_<random hex>, and applies the migrations into it. The
// schema outlives the tests and is never dropped by its own binary: the
// first NewStore or TestTx of a binary an hour later drops it. The
// transaction's search_path is the shared schema.
//
// Pass tx as the store.DBTX of every call. The returned Store has no pool
// (its Pool is nil), so a test never commits into the shared schema by
// mistake: code that uses the pool itself (Store.InTx, MessagesPurge,
// RunOutcomeInsertMany, RequireMigrated) needs NewStore. So do tests of
// several connections at once: rows a test writes are invisible to every
// other connection, and hold their unique keys until the test ends, so
// tests sharing the schema should use keys of their own.
//
// A statement that fails aborts the transaction: run a statement expected
// to fail in a savepoint (tx.Begin) when the test goes on after it. Within
// one transaction now() does not move.
func TestTx(ctx context.Context, t testing.TB) (*store.Store, pgx.Tx) {
	t.Helper()
	pool, err := txPool(ctx, t)
	if err != nil {
		t.Fatalf("storetest.TestTx: %v", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("storetest.TestTx: begin: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := tx.Rollback(ctx)
		// A test may roll back itself; a statement whose ctx was
		// cancelled closes the connection, which ends the transaction.
		if err == nil || errors.Is(err, pgx.ErrTxClosed) || tx.Conn().IsClosed() {
			return
		}
		t.Errorf("storetest.TestTx: roll back: %v", err)
	})
	return &store.Store{}, tx
}

// txShared is the schema TestTx transactions share, made once per test
// binary.
var txShared struct {
	once   sync.Once
	pool   *pgxpool.Pool
	schema string
	err    error
}

// txSchemaPrefix starts the names of the schemas TestTx makes.
const txSchemaPrefix = "tx_"

// schemaExpiry is the age after which a t_ or tx_ schema is taken to be
// left over by a test binary that has ended. A test binary runs for 10
// minutes unless -timeout says otherwise.
const schemaExpiry = time.Hour

// txPool returns the pool on the shared schema, making and migrating the
// schema on the first call.
func txPool(ctx context.Context, t testing.TB) (*pgxpool.Pool, error) {
	txShared.once.Do(func() {
		// The schema outlives the test that happens to make it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		base := BaseURL()
		if err := ensureDatabase(ctx, base); err != nil {
			txShared.err = err
			return
		}
		expireSchemas(ctx, t, base)
		schema := newSchemaName(txSchemaPrefix)
		if err := adminExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			txShared.err = fmt.Errorf("create schema %s: %w", schema, err)
			return
		}
		st, err := store.Open(ctx, withSearchPath(base, schema), nil)
		if err != nil {
			txShared.err = err
			return
		}
		if err := store.Migrate(ctx, st.Pool, nil); err != nil {
			st.Close()
			txShared.err = fmt.Errorf("migrate schema %s: %w", schema, err)
			return
		}
		txShared.pool, txShared.schema = st.Pool, schema
	})
	return txShared.pool, txShared.err
}

var expired sync.Map // base URL -> *sync.Once

// expireSchemas drops, once per test binary, the schemas earlier binaries
// left (see dropExpiredSchemas).
func expireSchemas(ctx context.Context, t testing.TB, base string) {
	v, _ := expired.LoadOrStore(base, &sync.Once{})
	v.(*sync.Once).Do(func() { dropExpiredSchemas(ctx, t, base, time.Now().Add(-schemaExpiry)) })
}

// dropExpiredSchemas drops the t_ and tx_ schemas made before cutoff, as
// their names tell. Another test binary may be dropping the same ones:
// failures are only logged.
func dropExpiredSchemas(ctx context.Context, t testing.TB, base string, cutoff time.Time) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Logf("storetest: list expired schemas: %v", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) OR starts_with(nspname, $2)`,
		schemaPrefix, txSchemaPrefix)
	if err != nil {
		t.Logf("storetest: list expired schemas: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Logf("storetest: list expired schemas: %v", err)
		return
	}
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, txSchemaPrefix)
		if !ok {
			rest = strings.TrimPrefix(name, schemaPrefix)
		}
		secs, _, ok := strings.Cut(rest, "_")
		made, err := strconv.ParseInt(secs, 10, 64)
		if !ok || err != nil || !time.Unix(made, 0).Before(cutoff) {
			continue
		}
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("storetest: drop expired schema %s: %v", name, err)
		}
	}
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

// QueuedMessage inserts batch (of schema) and one message in it, with
// external id id and body, from source "s", and returns the message's
// ingest result (its run queued, run number 1). It fails t on an error.
func QueuedMessage(ctx context.Context, t testing.TB, st *store.Store, batch, schema, id, body string) store.MessageIngestResult {
	t.Helper()
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: schema, SourceName: "s.jsonl"}); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(body))
	res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "s", ExternalID: id,
		Body: body, ContentHash: h[:], BatchID: batch, SchemaID: schema})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Proxied returns st's schema opened again through a TCP proxy that the
// test can cut (tcpproxy.Proxy.Cut), with at most poolMaxConns
// connections, and the proxy; both are closed at the test's end. The
// store's logger writes errors to the test log. A test database not given
// as a postgres:// URL skips the test.
func Proxied(t testing.TB, st *store.Store, poolMaxConns int) (*store.Store, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(SchemaURL(t, st))
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("the test database is not given as a postgres:// URL: %v", err)
	}
	cc := st.Pool.Config().ConnConfig
	p, err := tcpproxy.Listen(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(poolMaxConns))
	u.RawQuery = q.Encode()
	via, err := store.Open(context.Background(), u.String(), zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(via.Close)
	return via, p
}
