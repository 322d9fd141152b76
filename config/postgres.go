package config

import (
	"fmt"
	"slices"
	"strings"
)

// Postgres is the deployment's Postgres connection budget: how many
// connections every replica of every command may hold at once, so that
// the most replicas the autoscaler may start still fit the server's
// limit (docs/operations.md, "Connection budget").
//
// With MaxConnections 0 (the default) there is no budget: each process's
// pool holds at most store.DefaultMaxConns (16) unless DATABASE_URL sets
// pool_max_conns.
type Postgres struct {
	// MaxConnections is how many connections the deployment may hold on
	// the server: Postgres's max_connections less
	// superuser_reserved_connections and what other clients use, or
	// PgBouncer's max_client_conn when every command connects through
	// PgBouncer. 0 turns the budget off.
	MaxConnections int `yaml:"max_connections"`
	// Reserve is kept out of the pools for the short-lived commands
	// (migrate, report, retention, eval, triage admin) and for an
	// operator's psql. Each of those holds at most two connections at
	// once: migrate the lock's and the migration's, the others one query
	// at a time (eval's pool is ShortPool under a budget). Default 6.
	Reserve int `yaml:"reserve"`
	// Pools gives each long-running command its share of the rest and
	// the most replicas it may run at once. A configuration that sets it
	// names every command it gives a share; when it sets none,
	// DefaultPools.
	Pools map[string]PoolShare `yaml:"pools"`
}

// PoolShare is one long-running command's part of the budget.
type PoolShare struct {
	// Share is the command's part of MaxConnections − Reserve, in
	// percent; the shares add up to at most 100.
	Share int `yaml:"share"`
	// MaxReplicas is the most processes of the command that run at once:
	// the KEDA ScaledObject's maxReplicaCount for the worker, the
	// Deployment's replicas (plus its rolling update's maxSurge) for the
	// others.
	MaxReplicas int `yaml:"max_replicas"`
}

// PoolCommands are the long-running commands that take a share of the
// budget, by the names Pools uses.
var PoolCommands = []string{"worker", "ingest", "triage"}

// ShortPool is PoolSize's answer for a command not in PoolCommands under
// a budget (eval passes its name): migrating takes two connections at
// once (the lock's and the migration's), and none of them needs more.
const ShortPool = 2

// minPool is the least pool a long-running command can work with: the
// worker's committer and its relay loops each hold one at a time, and
// checking the migrations at start takes two.
const minPool = 2

// PoolSize returns the most connections one process of command may
// hold under the budget: ⌊(MaxConnections − Reserve) × share% ÷
// MaxReplicas⌋ for a command in PoolCommands, ShortPool for any other.
// It returns 0 when there is no budget (MaxConnections 0), and an error
// naming the numbers when the budget gives command fewer than 2.
func (p Postgres) PoolSize(command string) (int, error) {
	if p.MaxConnections == 0 {
		return 0, nil
	}
	if !slices.Contains(PoolCommands, command) {
		return ShortPool, nil
	}
	s, ok := p.Pools[command]
	if !ok || s.Share == 0 {
		return 0, fmt.Errorf("postgres.pools.%s: no share of the connection budget (postgres.max_connections %d): give it a share in percent and its max_replicas",
			command, p.MaxConnections)
	}
	n := (p.MaxConnections - p.Reserve) * s.Share / 100 / s.MaxReplicas
	if n < minPool {
		return 0, fmt.Errorf("postgres.pools.%s: %d%% of %d connections (postgres.max_connections %d less reserve %d) over %d replicas is %d per process; "+
			"at least %d are needed: raise postgres.max_connections or the share, or lower max_replicas",
			command, s.Share, p.MaxConnections-p.Reserve, p.MaxConnections, p.Reserve, s.MaxReplicas, n, minPool)
	}
	return n, nil
}

// Total returns the most connections the deployment may hold with every
// command at its max_replicas: the sum of the pools plus the reserve.
// It is at most MaxConnections when Validate accepts p.
func (p Postgres) Total() int {
	total := p.Reserve
	for _, c := range PoolCommands {
		if n, err := p.PoolSize(c); err == nil {
			total += n * p.Pools[c].MaxReplicas
		}
	}
	return total
}

// DefaultPools are the shares when the configuration names none: the
// worker's max_replicas is deploy/k8s's KEDA maxReplicaCount, ingest's
// and triage's their Deployments' replicas with a surge of one.
func DefaultPools() map[string]PoolShare {
	return map[string]PoolShare{
		"worker": {Share: 70, MaxReplicas: 20},
		"ingest": {Share: 15, MaxReplicas: 3},
		"triage": {Share: 15, MaxReplicas: 3},
	}
}

func (p Postgres) withDefaults() Postgres {
	if p.Reserve == 0 {
		p.Reserve = 6
	}
	if len(p.Pools) == 0 {
		p.Pools = DefaultPools()
	}
	return p
}

func (p Postgres) validate() error {
	if p.MaxConnections < 0 {
		return fmt.Errorf("postgres.max_connections: %d is below 0", p.MaxConnections)
	}
	if p.Reserve < 0 {
		return fmt.Errorf("postgres.reserve: %d is below 0", p.Reserve)
	}
	names := make([]string, 0, len(p.Pools))
	for name := range p.Pools {
		names = append(names, name)
	}
	slices.Sort(names)
	shares := 0
	for _, name := range names {
		s := p.Pools[name]
		if !slices.Contains(PoolCommands, name) {
			return fmt.Errorf("postgres.pools.%s: not a long-running command (want %s)", name, strings.Join(PoolCommands, ", "))
		}
		if s.Share < 0 || s.Share > 100 {
			return fmt.Errorf("postgres.pools.%s.share: %d is not a percentage in [0, 100]", name, s.Share)
		}
		if s.MaxReplicas < 1 {
			return fmt.Errorf("postgres.pools.%s.max_replicas: %d is below 1", name, s.MaxReplicas)
		}
		shares += s.Share
	}
	if shares > 100 {
		return fmt.Errorf("postgres.pools: the shares add up to %d%%, over 100%%", shares)
	}
	if p.MaxConnections == 0 {
		return nil
	}
	if p.Reserve+ShortPool > p.MaxConnections {
		return fmt.Errorf("postgres.reserve: %d leaves no room in postgres.max_connections %d", p.Reserve, p.MaxConnections)
	}
	for _, name := range names {
		if p.Pools[name].Share == 0 {
			continue
		}
		if _, err := p.PoolSize(name); err != nil {
			return err
		}
	}
	return nil
}
