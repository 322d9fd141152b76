package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"go.uber.org/zap"

	"github.com/extractq/extractq/migrations"
)

// Migrations are pairs of files NNNNNN_name.up.sql and NNNNNN_name.down.sql
// (pkgsite's numbering), embedded in package migrations. goose reads only
// its own one-file format, so each pair is handed to a goose Provider as a
// Go migration whose up and down run the file's SQL in one transaction;
// goose keeps the version table (goose_db_version, in the current schema),
// and xactLocker a Postgres advisory lock so two migrators never run at
// once.

// xactLocker is the migrators' lock, as a goose SessionLocker that holds
// through a pooler in transaction pooling (PoolerTransaction). goose's own
// Postgres session locker takes pg_advisory_lock on its connection and
// releases it with pg_advisory_unlock on the same connection later; through
// such a pooler the two statements may run on different server
// connections, so the unlock fails and the lock stays held by a server
// connection the pooler keeps open. xactLocker instead takes the lock with
// pg_try_advisory_xact_lock inside a transaction of its own on the pool,
// which keeps one server connection for as long as it is open, and ends
// that transaction to release it. The key is the one goose's session lock
// took (the same lock space), so a migrator of an older build still waits
// for this one and the other way round; a migrator that dies loses its
// transaction and so the lock. Each migration then runs on a second
// connection, so a migrator needs two at once.
type xactLocker struct {
	pool    *pgxpool.Pool
	key     int64
	poll    time.Duration // between tries while another migrator holds the lock
	timeout time.Duration // give up after this long

	tx pgx.Tx // open while the lock is held
}

// SessionLock takes the lock, trying every l.poll for up to l.timeout.
// goose's connection is not used: the lock has its own.
func (l *xactLocker) SessionLock(ctx context.Context, _ *sql.Conn) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store.Migrate: lock: %w", err)
	}
	// The transaction sits idle while migrations run beside it: a server
	// set to end idle transactions must not end this one, and so the lock.
	if _, err := tx.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = 0`); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("store.Migrate: lock: %w", err)
	}
	deadline := time.Now().Add(l.timeout)
	for {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, l.key).Scan(&got); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("store.Migrate: lock: %w", err)
		}
		if got {
			l.tx = tx
			return nil
		}
		if time.Now().After(deadline) {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("store.Migrate: another migrator has held the migration lock (advisory lock %d) for more than %v", l.key, l.timeout)
		}
		select {
		case <-ctx.Done():
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("store.Migrate: waiting for the migration lock: %w", ctx.Err())
		case <-time.After(l.poll):
		}
	}
}

// SessionUnlock releases the lock by ending its transaction.
func (l *xactLocker) SessionUnlock(ctx context.Context, _ *sql.Conn) error {
	if l.tx == nil {
		return nil
	}
	err := l.tx.Rollback(ctx)
	l.tx = nil
	if err != nil {
		return fmt.Errorf("store.Migrate: unlock: %w", err)
	}
	return nil
}

// MigrationStatus is one migration version and whether it is applied.
type MigrationStatus struct {
	Version   int64
	Name      string    // file name without .up.sql, such as "000001_core"
	Applied   bool      // recorded in the version table
	AppliedAt time.Time // zero if not applied
}

// Migrate applies every pending migration to the database and schema
// (search_path) of pool, each version in its own transaction. Concurrent
// migrators of the same schema wait for each other. The error names the
// failing version and the direction. log may be nil.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	return withProvider(ctx, pool, func(p *goose.Provider) error {
		results, err := p.Up(ctx)
		logResults(log, results)
		return migrateError("up", err)
	})
}

// MigrateDown rolls back the latest applied migration, in one
// transaction. The error names the version if that fails; if nothing is
// applied it wraps goose.ErrNoNextVersion.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	return withProvider(ctx, pool, func(p *goose.Provider) error {
		res, err := p.Down(ctx)
		if res != nil {
			logResults(log, []*goose.MigrationResult{res})
		}
		if errors.Is(err, goose.ErrNoNextVersion) {
			return fmt.Errorf("store.MigrateDown: no migration applied: %w", err)
		}
		return migrateError("down", err)
	})
}

// MigrateStatus lists every known migration, oldest first, with whether it
// is applied in pool's schema.
func MigrateStatus(ctx context.Context, pool *pgxpool.Pool) ([]MigrationStatus, error) {
	var out []MigrationStatus
	err := withProvider(ctx, pool, func(p *goose.Provider) error {
		st, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("store.MigrateStatus: %w", err)
		}
		for _, s := range st {
			out = append(out, MigrationStatus{
				Version:   s.Source.Version,
				Name:      migrationName(s.Source.Version),
				Applied:   s.State == goose.StateApplied,
				AppliedAt: s.AppliedAt,
			})
		}
		return nil
	})
	return out, err
}

// migrationFile is one version: the SQL of its up and down files.
type migrationFile struct {
	Version  int64
	Name     string // file name stem, such as "000001_core"
	Up, Down string
}

// loadMigrations reads the embedded migrations once.
var loadMigrations = sync.OnceValues(func() ([]migrationFile, error) {
	return readMigrations(migrations.FS)
})

// migrationName returns the file name stem of version v, or "".
func migrationName(v int64) string {
	files, _ := loadMigrations()
	for _, f := range files {
		if f.Version == v {
			return f.Name
		}
	}
	return ""
}

func withProvider(ctx context.Context, pool *pgxpool.Pool, fn func(*goose.Provider) error) error {
	files, err := loadMigrations()
	if err != nil {
		return err
	}
	gms := make([]*goose.Migration, 0, len(files))
	for _, f := range files {
		gms = append(gms, goose.NewGoMigration(f.Version,
			&goose.GoFunc{RunTx: execFile(f.Up)},
			&goose.GoFunc{RunTx: execFile(f.Down)},
		))
	}
	if n := pool.Config().MaxConns; n < 2 {
		return fmt.Errorf("store.Migrate: the pool allows %d connection; migrating needs two at once (the lock's and the migration's): "+
			"raise pool_max_conns", n)
	}
	// Advisory locks are per database; key the lock by schema so tests
	// migrating their own schemas in parallel do not wait for each other.
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("store.Migrate: read current schema: %w", err)
	}
	locker := &xactLocker{pool: pool, key: migrationLockKey(schema), poll: time.Second, timeout: 5 * time.Minute}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, nil,
		goose.WithGoMigrations(gms...),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(locker),
		goose.WithLogger(goose.NopLogger()),
	)
	if err != nil {
		return fmt.Errorf("store.Migrate: %w", err)
	}
	return fn(p)
}

// migrationLockKey is the advisory lock key of the migrators of schema.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("extractq.migrate." + schema))
	return int64(h.Sum64() >> 1)
}

// migrateError names the version and direction of a failed migration.
func migrateError(direction string, err error) error {
	if err == nil {
		return nil
	}
	var partial *goose.PartialError
	if errors.As(err, &partial) && partial.Failed != nil && partial.Failed.Source != nil {
		v := partial.Failed.Source.Version
		return fmt.Errorf("store.Migrate: migration %d (%s) %s failed: %w",
			v, migrationName(v), direction, partial.Err)
	}
	return fmt.Errorf("store.Migrate %s: %w", direction, err)
}

func logResults(log *zap.Logger, results []*goose.MigrationResult) {
	if log == nil {
		return
	}
	for _, r := range results {
		if r.Error != nil {
			continue
		}
		log.Info("migration done",
			zap.Int64("version", r.Source.Version),
			zap.String("name", migrationName(r.Source.Version)),
			zap.String("direction", r.Direction),
			zap.Duration("duration", r.Duration))
	}
}

// readMigrations reads the NNNNNN_name.up.sql / .down.sql pairs of fsys,
// oldest first. It returns an error for a file that is not part of a
// pair, a number used twice, or a version below 1: the checks pkgsite's
// check_bad_migrations makes.
func readMigrations(fsys fs.FS) ([]migrationFile, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("store: list migrations: %w", err)
	}
	byVersion := map[int64]*migrationFile{}
	for _, f := range files {
		stem, dir, ok := strings.Cut(path.Base(f), ".")
		if !ok || (dir != "up.sql" && dir != "down.sql") {
			return nil, fmt.Errorf("store: migration %q: want NNNNNN_name.up.sql or .down.sql", f)
		}
		num, _, ok := strings.Cut(stem, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("store: migration %q: want a version number >= 1 before '_'", f)
		}
		m := byVersion[v]
		if m == nil {
			m = &migrationFile{Version: v, Name: stem}
			byVersion[v] = m
		}
		if m.Name != stem {
			return nil, fmt.Errorf("store: duplicate migration version %d: %s and %s", v, m.Name, stem)
		}
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("store: read migration %q: %w", f, err)
		}
		if dir == "up.sql" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]migrationFile, 0, len(byVersion))
	for _, m := range byVersion {
		if strings.TrimSpace(m.Up) == "" || strings.TrimSpace(m.Down) == "" {
			return nil, fmt.Errorf("store: migration %s: want both .up.sql and .down.sql, non-empty", m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// execFile runs a whole migration file as one multi-statement Exec (pgx
// sends it with the simple protocol as it has no arguments).
func execFile(body string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, body)
		return err
	}
}

// EnsureDatabase creates the database named in url if it does not exist,
// by connecting to the "postgres" database of the same server with the
// same credentials; a database that accepts a connection is left alone,
// and "postgres" (which a pooler often does not serve) is then not
// needed. url is read as Open reads it (PoolConfig). A database created
// concurrently by someone else is not an error.
func EnsureDatabase(ctx context.Context, url string) error {
	pcfg, _, err := PoolConfig(url)
	if err != nil {
		return fmt.Errorf("store.EnsureDatabase: %w", err)
	}
	cfg := pcfg.ConnConfig
	name := cfg.Database
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	if name == "" || name == "postgres" {
		return nil
	}
	// A database that answers exists: nothing to do.
	if conn, err := pgx.ConnectConfig(ctx, cfg.Copy()); err == nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil
	}
	cfg = cfg.Copy()
	cfg.Database = "postgres"
	// Session settings such as search_path name objects of the target
	// database; they mean nothing here.
	delete(cfg.RuntimeParams, "search_path")
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("store.EnsureDatabase(%q): connect to %s/postgres: %w", name, where, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists)
	if err != nil {
		return fmt.Errorf("store.EnsureDatabase(%q) on %s: %w", name, where, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	// Two processes creating the same database at once: the loser sees
	// duplicate_database, or unique_violation on pg_database's name index
	// when both passed the existence check.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgDuplicateDatabase || pgErr.Code == pgUniqueViolation) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store.EnsureDatabase(%q) on %s: create: %w", name, where, err)
	}
	return nil
}

// StartupRetryTime is how long a command waits at start-up for Postgres
// to answer RequireMigrated when it restarts meanwhile.
const StartupRetryTime = 30 * time.Second

// RequireMigrated returns nil when the database (the pool's current
// schema) has every migration this build knows applied, else an error
// naming what it has and the command that migrates it. Commands call it
// at start-up, so an unmigrated database is named at once rather than as
// a missing table at the first query.
func (s *Store) RequireMigrated(ctx context.Context) error {
	files, err := loadMigrations()
	if err != nil || len(files) == 0 {
		return fmt.Errorf("store.RequireMigrated: embedded migrations: %v", err)
	}
	want := files[len(files)-1].Version
	const fix = "run `go run ./cmd/migrate up` (scripts/setup.sh does) against it"
	var table *string
	if err := s.Pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version')::text`).Scan(&table); err != nil {
		return fmt.Errorf("store.RequireMigrated: %w", err)
	}
	if table == nil {
		return fmt.Errorf("the database has no migrations applied; %s", fix)
	}
	var have *int64
	if err := s.Pool.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version WHERE is_applied AND version_id > 0`).Scan(&have); err != nil {
		return fmt.Errorf("store.RequireMigrated: %w", err)
	}
	if have == nil || *have < want {
		n := int64(0)
		if have != nil {
			n = *have
		}
		return fmt.Errorf("the database is at migration %d of %d; %s", n, want, fix)
	}
	return nil
}
