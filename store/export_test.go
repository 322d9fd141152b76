package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ReadMigrations exposes readMigrations to the tests of package store_test.
var ReadMigrations = readMigrations

// MigrationLockKey exposes migrationLockKey: the advisory lock key of the
// migrators of a schema.
var MigrationLockKey = migrationLockKey

// NewMigrationLocker returns the migrators' lock on pool with key, as
// Migrate makes it (SessionLock and SessionUnlock ignore their conn).
func NewMigrationLocker(pool *pgxpool.Pool, key int64) *xactLocker {
	return &xactLocker{pool: pool, key: key, poll: 100 * time.Millisecond, timeout: 2 * time.Second}
}

// TriageSearchSQL exposes triageSearchSQL, the search's condition on m
// with one %s for its query.
const TriageSearchSQL = triageSearchSQL
