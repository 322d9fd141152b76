package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
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

// TestOpenWithMaxConns: the connection budget sizes the pool, and a URL
// asking for more than the budget gives is refused, naming both numbers.
func TestOpenWithMaxConns(t *testing.T) {
	ctx := context.Background()
	base := storetest.BaseURL()
	st, err := store.OpenWith(ctx, base, nil, store.OpenOptions{MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := st.Pool.Config().MaxConns; n != 3 {
		t.Errorf("pool of %d; want the budget's 3", n)
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	_, err = store.OpenWith(ctx, base+sep+"pool_max_conns=10", nil, store.OpenOptions{MaxConns: 3})
	if err == nil || !strings.Contains(err.Error(), "pool_max_conns 10 is over this process's 3 of the connection budget") {
		t.Errorf("pool_max_conns over the budget: %v", err)
	}
	below, err := store.OpenWith(ctx, base+sep+"pool_max_conns=2", nil, store.OpenOptions{MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer below.Close()
	if n := below.Pool.Config().MaxConns; n != 2 {
		t.Errorf("pool_max_conns=2 under a budget of 3 gave a pool of %d", n)
	}
}
