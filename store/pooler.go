package store

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolerParam is the database URL parameter that says what stands between
// the product and Postgres. Open reads it and removes it, so neither pgx
// nor the server sees it. Its values are the Pooler constants.
const PoolerParam = "pooler"

// Pooler is a PoolerParam value: how the connections of a database URL
// reach Postgres.
type Pooler string

const (
	// PoolerNone is the default (no pooler parameter, or "none" or
	// "session"): connections reach Postgres directly, or through a pooler
	// in session pooling, which gives each client one server connection
	// for as long as it stays connected. pgx's defaults hold: each
	// connection prepares and caches its statements (cache_statement).
	PoolerNone Pooler = "none"

	// PoolerTransaction ("transaction") is a pooler in transaction pooling,
	// such as PgBouncer's pool_mode = transaction: a client holds a server
	// connection only for one transaction (or one statement outside a
	// transaction), so nothing a connection keeps between transactions
	// survives. Open then runs every statement with pgx's
	// QueryExecModeExec: the extended protocol with the unnamed statement,
	// parse, bind and execute sent at once, so no named prepared statement
	// is left on a server connection another client is handed next (where
	// pgx's default mode fails with SQLSTATE 42P05 "prepared statement
	// already exists", or 26000 "does not exist"). Its statement and
	// description caches are off. PgBouncer 1.21 and later can track
	// protocol-level prepared statements (max_prepared_statements); the
	// product does not rely on it, so any version works.
	PoolerTransaction Pooler = "transaction"
)

// PoolConfig parses a database URL (or keyword/value string, as pgx
// accepts) into the pool configuration Open connects with, and returns
// the pooler it names (PoolerParam). It is the one place where the
// product chooses pgx's settings: every command's connections come from
// Open, and so from here.
//
// With PoolerNone the configuration is pgx's, with at most
// DefaultMaxConns connections unless the URL sets pool_max_conns. With
// PoolerTransaction it also sets default_query_exec_mode to exec and
// turns the statement caches off; the URL may instead set
// default_query_exec_mode=simple_protocol (client-side parameter
// interpolation), but no mode that keeps or describes statements across
// round trips.
//
// The error names the parameter at fault and never quotes the URL (it may
// hold a password).
func PoolConfig(url string) (*pgxpool.Config, Pooler, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL; do not repeat it here.
		return nil, "", fmt.Errorf("parse database URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default, max(4, CPUs), starves a worker with many runs in
		// flight; 16 stays far below Postgres's default max_connections
		// (100) for a few replicas. Set pool_max_conns in the URL to change it.
		cfg.MaxConns = DefaultMaxConns
	}
	// pgx hands parameters it does not know to the server as session
	// settings: take ours out first.
	params := cfg.ConnConfig.RuntimeParams
	value, set := params[PoolerParam]
	delete(params, PoolerParam)
	if set && value == "" {
		return nil, "", fmt.Errorf("database URL: %s is empty: want none, session or transaction", PoolerParam)
	}
	pooler := PoolerNone
	switch value {
	case "", "none", "session":
	case "transaction":
		pooler = PoolerTransaction
	case "statement":
		return nil, "", fmt.Errorf("database URL: %s=statement: statement pooling allows no transaction of more than one statement, "+
			"and the product needs them; use the pooler's transaction pooling and %s=transaction", PoolerParam, PoolerParam)
	default:
		return nil, "", fmt.Errorf("database URL: %s=%q: want none, session or transaction", PoolerParam, value)
	}
	if pooler == PoolerTransaction {
		cc := cfg.ConnConfig
		explicit := strings.Contains(url, "default_query_exec_mode")
		switch mode := cc.DefaultQueryExecMode; {
		case mode == pgx.QueryExecModeExec, mode == pgx.QueryExecModeSimpleProtocol:
		case mode == pgx.QueryExecModeCacheStatement && !explicit:
			cc.DefaultQueryExecMode = pgx.QueryExecModeExec
		default:
			return nil, "", fmt.Errorf("database URL: default_query_exec_mode %q does not work through a pooler in transaction pooling "+
				"(%s=transaction): leave it out (the product uses exec) or use simple_protocol", mode, PoolerParam)
		}
		cc.StatementCacheCapacity = 0
		cc.DescriptionCacheCapacity = 0
	}
	return cfg, pooler, nil
}
