package config_test

import (
	"strings"
	"testing"

	"github.com/extractq/extractq/config"
)

func TestPoolSize(t *testing.T) {
	p := config.Postgres{MaxConnections: 200, Reserve: 6, Pools: map[string]config.PoolShare{
		"worker": {Share: 70, MaxReplicas: 20}, "ingest": {Share: 15, MaxReplicas: 3}, "triage": {Share: 15, MaxReplicas: 3},
	}}
	for cmd, want := range map[string]int{
		"worker": 6, // 194 × 0.70 / 20 = 6.79
		"ingest": 9, // 194 × 0.15 / 3 = 9.7
		"triage": 9, // 194 × 0.15 / 3 = 9.7
		"report": config.ShortPool,
		"eval":   config.ShortPool,
	} {
		got, err := p.PoolSize(cmd)
		if err != nil || got != want {
			t.Errorf("PoolSize(%s) = %d, %v; want %d", cmd, got, err, want)
		}
	}
	// 6 × 20 + 9 × 3 + 9 × 3 + 6 = 180.
	if got := p.Total(); got != 180 || got > p.MaxConnections {
		t.Errorf("Total() = %d; want 180, at most %d", got, p.MaxConnections)
	}
	if n, err := (config.Postgres{}).PoolSize("worker"); n != 0 || err != nil {
		t.Errorf("no budget: PoolSize = %d, %v; want 0, nil", n, err)
	}
}

func TestPostgresValidate(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"postgres: {max_connections: 100, pools: {worker: {share: 70, max_replicas: 40}}}",
			"postgres.pools.worker: 70% of 94 connections (postgres.max_connections 100 less reserve 6) over 40 replicas is 1 per process; at least 2 are needed"},
		{"postgres: {max_connections: 100, pools: {worker: {share: 70, max_replicas: 2}, ingest: {share: 40, max_replicas: 1}}}",
			"postgres.pools: the shares add up to 110%, over 100%"},
		{"postgres: {pools: {retention: {share: 10, max_replicas: 1}}}",
			"postgres.pools.retention: not a long-running command (want worker, ingest, triage)"},
		{"postgres: {pools: {worker: {share: 10, max_replicas: 0}}}", "postgres.pools.worker.max_replicas: 0 is below 1"},
		{"postgres: {pools: {worker: {share: 120, max_replicas: 1}}}", "postgres.pools.worker.share: 120 is not a percentage"},
		{"postgres: {max_connections: -1}", "postgres.max_connections: -1 is below 0"},
		{"postgres: {max_connections: 7, reserve: 6}", "postgres.reserve: 6 leaves no room in postgres.max_connections 7"},
	} {
		_, err := config.Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %q", tc.yaml, err, tc.want)
		}
	}
	c, err := config.Parse([]byte("postgres: {max_connections: 100, pools: {worker: {share: 100, max_replicas: 10}}}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Postgres.PoolSize("triage"); err == nil || !strings.Contains(err.Error(), "postgres.pools.triage: no share") {
		t.Errorf("triage without a share: %v", err)
	}
}
