package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Errors returned by the store. Callers match them with errors.Is; the
// returned errors wrap them with the operation and key.
var (
	// ErrNotFound means the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a row with the same key exists with different
	// content, such as a message id re-ingested with a different text. The
	// stored row is never changed.
	ErrConflict = errors.New("conflict")
	// ErrOutcomeExists means the run already has an outcome (it is no longer
	// queued); nothing was written.
	ErrOutcomeExists = errors.New("run outcome already recorded")
	// ErrErased means the message's text was erased (MessagesErase): it is
	// not stored again and no run is made for it.
	ErrErased = errors.New("message erased")
)

// DBTX is what every store method runs its SQL on. It is satisfied by
// *pgxpool.Pool (each statement on its own) and pgx.Tx (inside the
// caller's transaction).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ DBTX = (*pgxpool.Pool)(nil)
	_ DBTX = pgx.Tx(nil)
)

// beginner is a DBTX that can start a transaction, such as *pgxpool.Pool.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store is the product's Postgres access. Every method takes the DBTX to
// run on, so callers choose between the pool and a transaction (see InTx).
type Store struct {
	// Pool is the connection pool. Pass it as the DBTX for work that needs
	// no transaction of the caller's.
	Pool *pgxpool.Pool

	pooler Pooler
	log    *zap.Logger
}

// DefaultMaxConns is the pool size Open uses when the URL sets no
// pool_max_conns.
const DefaultMaxConns = 16

// openPingTimeout bounds how long Open waits for the server to answer.
const openPingTimeout = 30 * time.Second

// Open connects a pool to url (a Postgres URL or keyword/value string, as
// pgx accepts; unknown URL parameters such as search_path become session
// settings), configured by PoolConfig (which reads the pooler parameter),
// and pings the server, retrying with exponential backoff for up to 30s
// so a server that is still starting is waited for. The error names the
// host and database, never the password. log may be nil.
func Open(ctx context.Context, url string, log *zap.Logger) (*Store, error) {
	return OpenWith(ctx, url, log, OpenOptions{})
}

// OpenOptions change how OpenWith opens the pool.
type OpenOptions struct {
	// MaxConns is the pool's size from the deployment's connection budget
	// (config.Postgres.PoolSize); 0 leaves it to the URL's pool_max_conns
	// or DefaultMaxConns. A URL that sets pool_max_conns above it is
	// refused: the budget would not hold.
	MaxConns int
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, url string, log *zap.Logger, o OpenOptions) (*Store, error) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("store")
	cfg, pooler, err := PoolConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store.Open: %w", err)
	}
	if o.MaxConns > 0 {
		if strings.Contains(url, "pool_max_conns") {
			if cfg.MaxConns > int32(o.MaxConns) {
				return nil, fmt.Errorf("store.Open: database URL: pool_max_conns %d is over this process's %d of the connection budget (postgres.max_connections): "+
					"take pool_max_conns out of the URL or lower it", cfg.MaxConns, o.MaxConns)
			}
		} else {
			cfg.MaxConns = int32(o.MaxConns)
		}
		if cfg.MinConns > cfg.MaxConns {
			cfg.MinConns = cfg.MaxConns
		}
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store.Open(%s): %w", where, err)
	}
	start := time.Now()
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := pool.Ping(pingCtx)
		if permanentConnectError(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(backoff.NewExponentialBackOff()),
		backoff.WithMaxElapsedTime(openPingTimeout),
		backoff.WithNotify(func(err error, next time.Duration) {
			log.Warn("database not ready, retrying",
				zap.String("server", where), zap.Duration("retry_in", next), zap.Error(err))
		}),
	)
	if err != nil {
		pool.Close()
		if permanentConnectError(err) {
			return nil, fmt.Errorf("store.Open: Postgres at %s refused the connection: %w%s", where, err, startupParamHint(err))
		}
		return nil, fmt.Errorf("store.Open: cannot reach Postgres at %s (tried for %v): %w", where, time.Since(start).Round(100*time.Millisecond), err)
	}
	log.Debug("connected", zap.String("server", where), zap.String("pooler", string(pooler)),
		zap.Stringer("query_exec_mode", cfg.ConnConfig.DefaultQueryExecMode))
	return &Store{Pool: pool, pooler: pooler, log: log}, nil
}

// permanentConnectError reports whether err will not go away by waiting:
// bad credentials, an unknown database or role.
func permanentConnectError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch {
	case strings.HasPrefix(pgErr.Code, "28"): // invalid authorization
		return true
	case pgErr.Code == "3D000": // invalid_catalog_name: no such database
		return true
	case isUnsupportedStartupParam(pgErr):
		return true
	}
	return false
}

// isUnsupportedStartupParam reports whether a pooler refused a session
// setting the URL carries: PgBouncer answers 08P01 "unsupported startup
// parameter: NAME" for any but the few it tracks (client_encoding,
// DateStyle, TimeZone, standard_conforming_strings, application_name)
// unless its ignore_startup_parameters (or, in later versions, its
// track_extra_parameters) names it.
func isUnsupportedStartupParam(pgErr *pgconn.PgError) bool {
	return pgErr.Code == "08P01" && strings.Contains(pgErr.Message, "unsupported startup parameter")
}

// startupParamHint says what to do about a refused session setting, or
// returns "" for any other error.
func startupParamHint(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !isUnsupportedStartupParam(pgErr) {
		return ""
	}
	name := "it"
	if _, after, ok := strings.Cut(pgErr.Message, "parameter:"); ok && strings.TrimSpace(after) != "" {
		name = strings.TrimSpace(after)
	}
	return fmt.Sprintf(" (a pooler refused the URL's session setting %s: drop it from the URL and set it on the role instead, "+
		"as in ALTER ROLE name SET %s = ...; docs/operations.md#pgbouncer)", name, name)
}

// Pooler returns what the store's URL said stands between it and
// Postgres (PoolConfig).
func (s *Store) Pooler() Pooler { return s.pooler }

// Close closes the pool, waiting for connections in use to be released.
func (s *Store) Close() {
	s.Pool.Close()
}

// InTx runs fn in one transaction on the pool: it commits if fn returns
// nil and rolls back otherwise, returning fn's error. A COMMIT that fails
// without an answer from Postgres is an error MaybeCommitted reports: the
// transaction may have committed all the same.
func (s *Store) InTx(ctx context.Context, fn func(tx DBTX) error) error {
	return beginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return fn(tx) })
}

// ReadSnapshot runs fn in one read-only REPEATABLE READ transaction on the
// pool, so every statement fn runs on tx sees the database as it was at
// the first one: figures read by several queries (a batch's counts, its
// triage items, its accounting) agree with each other while workers keep
// committing. It returns fn's error, or the error of beginning or ending
// the transaction; a write in fn fails (SQLSTATE 25006).
func (s *Store) ReadSnapshot(ctx context.Context, fn func(tx DBTX) error) error {
	tx, err := s.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// beginFunc is pgx.BeginFunc, its COMMIT's error wrapped in commitError.
func beginFunc(ctx context.Context, db beginner, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return &commitError{err: err}
	}
	return nil
}

// commitError is the error of a COMMIT: see MaybeCommitted.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// inTx runs fn in a transaction on db: db itself if it already is one,
// else a new one begun on db.
func inTx(ctx context.Context, db DBTX, fn func(tx DBTX) error) error {
	if _, ok := db.(pgx.Tx); ok {
		return fn(db)
	}
	if b, ok := db.(beginner); ok {
		return beginFunc(ctx, b, func(tx pgx.Tx) error { return fn(tx) })
	}
	// An executor that can neither begin nor is a pgx.Tx: run as given.
	return fn(db)
}

// Postgres error codes the store translates.
const (
	pgUniqueViolation   = "23505"
	pgDuplicateDatabase = "42P04"
	pgUndefinedTable    = "42P01"
	// pgDuplicatePreparedStatement and pgInvalidSQLStatementName are what
	// named prepared statements meet through a pooler in transaction
	// pooling: one already there, or one missing.
	pgDuplicatePreparedStatement = "42P05"
	pgInvalidSQLStatementName    = "26000"
	// pgMessageErased is raised by the runs_refuse_erased trigger
	// (migration 000008) when a run is made for an erased message.
	pgMessageErased = "EQ001"
)

// outcomeConstraints are the unique constraints that mean "this run
// already has an outcome".
var outcomeConstraints = map[string]bool{
	"extractions_run_key":  true,
	"triage_items_run_key": true,
}

// interpretError translates driver errors into the store's errors at the
// boundary: pgx.ErrNoRows becomes ErrNotFound and a unique violation
// becomes ErrOutcomeExists or ErrConflict (naming the constraint). A
// missing table and pgx's statement cache meeting a transaction pooler
// get a hint of what to do. Other errors are returned unchanged.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgUndefinedTable {
		return fmt.Errorf("%w: the database lacks the product's tables; run `go run ./cmd/migrate up` (scripts/setup.sh does) against it", err)
	}
	if errors.As(err, &pgErr) && (pgErr.Code == pgDuplicatePreparedStatement || pgErr.Code == pgInvalidSQLStatementName) &&
		strings.Contains(pgErr.Message, "stmtcache_") {
		// pgx's own statement cache (its statements are named
		// stmtcache_<hash>) met a server connection that another client
		// had used: a pooler in transaction pooling.
		return fmt.Errorf("%w: behind a pooler in transaction pooling (such as PgBouncer), add %s=transaction to DATABASE_URL "+
			"(docs/operations.md#pgbouncer)", err, PoolerParam)
	}
	if errors.As(err, &pgErr) && pgErr.Code == pgMessageErased {
		return fmt.Errorf("%w: %s", ErrErased, pgErr.Message)
	}
	if ve := valueError(err); ve != nil {
		// Refused for a value (class 22 or 54): the caller can tell
		// which input carried it (errors.As *ValueError).
		return fmt.Errorf("%w: %w", ve, err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation {
		if outcomeConstraints[pgErr.ConstraintName] {
			return fmt.Errorf("%w (constraint %s)", ErrOutcomeExists, pgErr.ConstraintName)
		}
		return fmt.Errorf("%w (constraint %s)", ErrConflict, pgErr.ConstraintName)
	}
	return err
}
