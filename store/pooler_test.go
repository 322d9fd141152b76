package store_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/store"
)

func TestPoolConfig(t *testing.T) {
	t.Parallel()
	const base = "postgres://u@127.0.0.1:5432/db?sslmode=disable"
	for _, tc := range []struct {
		query  string
		pooler store.Pooler
		mode   pgx.QueryExecMode
		cache  int // statement cache capacity
	}{
		{"", store.PoolerNone, pgx.QueryExecModeCacheStatement, 512},
		{"&pooler=none", store.PoolerNone, pgx.QueryExecModeCacheStatement, 512},
		{"&pooler=session", store.PoolerNone, pgx.QueryExecModeCacheStatement, 512},
		{"&pooler=transaction", store.PoolerTransaction, pgx.QueryExecModeExec, 0},
		{"&pooler=transaction&default_query_exec_mode=simple_protocol", store.PoolerTransaction, pgx.QueryExecModeSimpleProtocol, 0},
		{"&pooler=transaction&default_query_exec_mode=exec", store.PoolerTransaction, pgx.QueryExecModeExec, 0},
		{"&default_query_exec_mode=exec", store.PoolerNone, pgx.QueryExecModeExec, 512},
	} {
		cfg, pooler, err := store.PoolConfig(base + tc.query)
		if err != nil {
			t.Errorf("%q: %v", tc.query, err)
			continue
		}
		cc := cfg.ConnConfig
		if pooler != tc.pooler || cc.DefaultQueryExecMode != tc.mode || cc.StatementCacheCapacity != tc.cache {
			t.Errorf("%q: pooler %q, mode %v, cache %d; want %q, %v, %d", tc.query,
				pooler, cc.DefaultQueryExecMode, cc.StatementCacheCapacity, tc.pooler, tc.mode, tc.cache)
		}
		if _, ok := cc.RuntimeParams["pooler"]; ok {
			t.Errorf("%q: pooler left as a session setting", tc.query)
		}
		if cfg.MaxConns != store.DefaultMaxConns {
			t.Errorf("%q: max conns %d", tc.query, cfg.MaxConns)
		}
	}
	// The keyword/value form too.
	if _, pooler, err := store.PoolConfig("host=127.0.0.1 dbname=db pooler=transaction"); err != nil || pooler != store.PoolerTransaction {
		t.Errorf("keyword/value: pooler %q, %v", pooler, err)
	}

	for query, want := range map[string]string{
		"&pooler=pgbouncer": "want none, session or transaction",
		"&pooler=":          "pooler is empty",
		"&pooler=statement": "statement pooling",
		"&pooler=transaction&default_query_exec_mode=cache_statement": "default_query_exec_mode",
		"&pooler=transaction&default_query_exec_mode=cache_describe":  "default_query_exec_mode",
		"&pooler=transaction&default_query_exec_mode=describe_exec":   "default_query_exec_mode",
	} {
		_, _, err := store.PoolConfig(base + query)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v; want one with %q", query, err, want)
		}
	}
	if _, _, err := store.PoolConfig("postgres://u:secret@127.0.0.1:5432/db?pooler=x"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("err = %v; want one without the password", err)
	}
}
