package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// The tests below run through a private PgBouncer in transaction pooling
// (storetest.NewPgBouncer), each with its own database.

// TestPgBouncerStatements shows why pgx's defaults fail behind PgBouncer
// in transaction pooling and that pooler=transaction does not: two client
// connections are handed one server connection in turn, and the second
// finds the first one's cached prepared statement there.
func TestPgBouncerStatements(t *testing.T) {
	t.Parallel()
	b := storetest.NewPgBouncer(t)
	b.NewStore(t) // migrated

	// acquire2 opens a store on url and holds two of its connections.
	acquire2 := func(t *testing.T, url string) (*store.Store, [2]store.DBTX) {
		t.Helper()
		st, err := store.Open(t.Context(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		var conns [2]store.DBTX
		for i := range conns {
			c, err := st.Pool.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Release)
			conns[i] = c
		}
		return st, conns
	}

	t.Run("ClientsShareAServerConnection", func(t *testing.T) {
		// What makes the rest matter: outside a transaction, a client
		// holds no server connection of its own.
		_, c := acquire2(t, b.URL)
		var pid [2]int
		for i := range c {
			if err := c[i].QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid[i]); err != nil {
				t.Fatal(err)
			}
		}
		if pid[0] != pid[1] {
			t.Fatalf("two idle clients ran on backends %d and %d; want one (transaction pooling)", pid[0], pid[1])
		}
	})

	t.Run("DefaultsFailWith42P05", func(t *testing.T) {
		st, c := acquire2(t, b.PlainURL)
		if st.Pooler() != store.PoolerNone {
			t.Fatalf("pooler = %q", st.Pooler())
		}
		ctx := t.Context()
		if err := st.BatchInsert(ctx, c[0], store.BatchInsertParams{ID: "plain-1", SchemaID: "support_ticket"}); err != nil {
			t.Fatalf("first client: %v", err)
		}
		err := st.BatchInsert(ctx, c[1], store.BatchInsertParams{ID: "plain-2", SchemaID: "support_ticket"})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P05" {
			t.Fatalf("second client: err = %v; want SQLSTATE 42P05 (prepared statement already exists)", err)
		}
		if !strings.Contains(err.Error(), "pooler=transaction") {
			t.Errorf("err = %v; want it to name pooler=transaction", err)
		}
	})

	t.Run("PoolerTransactionWorks", func(t *testing.T) {
		st, c := acquire2(t, b.URL)
		if st.Pooler() != store.PoolerTransaction || st.Pool.Config().ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeExec {
			t.Fatalf("pooler %q, mode %v; want transaction, exec", st.Pooler(), st.Pool.Config().ConnConfig.DefaultQueryExecMode)
		}
		ctx := t.Context()
		for i := range 3 {
			for j, db := range c {
				if err := st.BatchInsert(ctx, db, store.BatchInsertParams{ID: fmt.Sprintf("tx-%d-%d", i, j), SchemaID: "support_ticket"}); err != nil {
					t.Fatalf("client %d, try %d: %v", j, i, err)
				}
			}
		}
		// Many clients at once over the few server connections, inside
		// and outside transactions.
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range 16 {
			wg.Go(func() {
				for i := range 20 {
					id := fmt.Sprintf("many-%d-%d", g, i)
					err := st.InTx(ctx, func(tx store.DBTX) error {
						return st.BatchInsert(ctx, tx, store.BatchInsertParams{ID: id, SchemaID: "support_ticket"})
					})
					if err == nil {
						_, err = st.BatchSummary(ctx, st.Pool, id)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestPgBouncerMigrate migrates through PgBouncer: the database needs no
// "postgres" database to be reached, two migrators at once both succeed,
// the lock waits for a migrator holding it directly on Postgres, and none
// is left held.
func TestPgBouncerMigrate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := storetest.NewPgBouncer(t)

	// The bouncer serves this database only: EnsureDatabase must not
	// need "postgres".
	if err := store.EnsureDatabase(ctx, b.URL); err != nil {
		t.Fatalf("EnsureDatabase through pgbouncer: %v", err)
	}

	direct, err := pgx.Connect(ctx, b.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.WithoutCancel(ctx))
	// goose makes its version table before it takes the lock (to ask
	// whether anything is pending): the first migration's tables say
	// whether a migration ran.
	migrated := func() bool {
		var ok bool
		if err := direct.QueryRow(ctx, `SELECT to_regclass('public.messages') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	advisoryLocks := func() int {
		var n int
		err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND d.datname = current_database()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A migrator directly on Postgres (an older build's session lock has
	// this key too) holds the lock: a migrator through PgBouncer waits.
	key := store.MigrationLockKey("public")
	if _, err := direct.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	stores := make([]*store.Store, 2)
	for i := range stores {
		if stores[i], err = store.Open(ctx, b.URL, nil); err != nil {
			t.Fatal(err)
		}
		defer stores[i].Close()
	}
	// On a failure below, the migrators stop waiting (Close waits for them).
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, len(stores))
	for _, st := range stores {
		go func() { done <- store.Migrate(mctx, st.Pool, nil) }()
	}
	select {
	case err := <-done:
		t.Fatalf("Migrate returned (%v) while another migrator held the lock", err)
	case <-time.After(1500 * time.Millisecond):
	}
	if migrated() {
		t.Fatal("a migration ran while another migrator held the lock")
	}
	if _, err := direct.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	for range stores {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Migrate through pgbouncer: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Migrate still waits a minute after the lock was released")
		}
	}
	if n := advisoryLocks(); n != 0 {
		t.Fatalf("%d advisory locks held after the migrators finished", n)
	}
	st := stores[0]
	if err := st.RequireMigrated(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.RequireMigrated(ctx); err == nil {
		t.Fatal("RequireMigrated after down: no error")
	}
	if err := store.Migrate(ctx, st.Pool, nil); err != nil {
		t.Fatal(err)
	}
	list, err := store.MigrateStatus(ctx, st.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list {
		if !m.Applied {
			t.Errorf("%s not applied", m.Name)
		}
	}
	if n := advisoryLocks(); n != 0 {
		t.Fatalf("%d advisory locks held after down and up", n)
	}
}

// TestPgBouncerMigrationLock: through PgBouncer a session's advisory lock
// (what goose's own locker takes) is no lock at all, as the next client
// handed the same server connection holds it too; the migrators' lock,
// held in a transaction, excludes every other client until released.
func TestPgBouncerMigrationLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := storetest.NewPgBouncer(t)
	st, err := store.Open(ctx, b.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	direct, err := pgx.Connect(ctx, b.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.WithoutCancel(ctx))
	held := func() int {
		var n int
		err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// tryFromOthers asks n other clients, one after the other, for a
	// session lock on key; it returns how many got it (and releases it).
	tryFromOthers := func(key int64, n int) int {
		got := 0
		for range n {
			c, err := st.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ok bool
			if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			if ok {
				got++
				if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
					t.Fatal(err)
				}
			}
			c.Release()
		}
		return got
	}

	t.Run("ASessionLockDoesNotHold", func(t *testing.T) {
		const key = 42
		c, err := st.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		var ok bool
		if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil || !ok {
			t.Fatalf("lock: %v, %v", ok, err)
		}
		if n := tryFromOthers(key, 3); n == 0 {
			t.Fatal("no other client got the session lock; want the ones handed its server connection")
		}
		// Release it from whichever client lands on its server connection.
		for try := 0; held() > 0; try++ {
			if try == 20 {
				t.Fatal("the session lock stays held (PgBouncer's server connection ends it when the test does)")
			}
			if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("TheMigrationLockHolds", func(t *testing.T) {
		const key = 43
		l := store.NewMigrationLocker(st.Pool, key)
		if err := l.SessionLock(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 1 {
			t.Fatalf("%d advisory locks held; want 1", n)
		}
		if n := tryFromOthers(key, 2*storetest.PoolSize); n != 0 {
			t.Fatalf("%d other clients got the lock while it was held", n)
		}
		// A second migrator's lock waits, then gives up.
		l2 := store.NewMigrationLocker(st.Pool, key)
		if err := l2.SessionLock(ctx, nil); err == nil || !strings.Contains(err.Error(), "another migrator") {
			t.Fatalf("second lock: %v; want one saying another migrator holds it", err)
		}
		if err := l.SessionUnlock(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 0 {
			t.Fatalf("%d advisory locks held after unlock", n)
		}
		if err := l2.SessionLock(ctx, nil); err != nil {
			t.Fatalf("lock after unlock: %v", err)
		}
		if err := l2.SessionUnlock(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPgBouncerTriageAndRetention runs the triage and retention paths
// through PgBouncer: claim and approve (audited), erase on request (its
// triggers read a SET LOCAL setting) and the purge.
func TestPgBouncerTriageAndRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewPgBouncer(t).NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)

	item, r := triageItemFixture(ctx, t, st, st.Pool, batch)
	if _, err := st.TriageItemClaim(ctx, st.Pool, store.TriageItemClaimParams{ItemID: item, Reviewer: "alice", Via: store.ViaAPI}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TriageItemApprove(ctx, st.Pool, store.TriageItemApproveParams{ItemID: item, Reviewer: "alice", Via: store.ViaAPI,
		Data: []byte(`{"order_id":"48213"}`), SchemaVersion: "1"}); err != nil {
		t.Fatal(err)
	}
	if got := auditActions(ctx, t, st, st.Pool, item); len(got) < 2 {
		t.Errorf("audit of item %d = %v; want the claim and the approval", item, got)
	}

	var source, externalID string
	if err := st.Pool.QueryRow(ctx, `SELECT source, external_id FROM messages WHERE id = $1`, r.MessageID).Scan(&source, &externalID); err != nil {
		t.Fatal(err)
	}
	got, err := st.MessagesErase(ctx, st.Pool, []store.MessageKey{{Source: source, ExternalID: externalID}},
		store.ErasureParams{Actor: "dpo", Via: store.ViaCLI, Reason: "request 1"})
	if err != nil || len(got) != 1 || got[0].Status != store.ErasureErased {
		t.Fatalf("erase = %+v, %v", got, err)
	}
	if left := textLeft(ctx, t, st.Pool, r.MessageID); len(left) > 0 {
		t.Errorf("erased message keeps text in %v", left)
	}

	done := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(done)); err != nil {
		t.Fatal(err)
	}
	res, err := st.MessagesPurge(ctx, store.PurgeParams{ErasureParams: store.ErasureParams{Actor: "retention", Via: store.ViaCLI},
		ReceivedBefore: time.Now().Add(time.Hour)})
	if err != nil || res.Erased != 1 {
		t.Fatalf("purge = %+v, %v; want 1 erased", res, err)
	}
}

// TestPgBouncerSearchPath: PgBouncer refuses startup parameters it does
// not track, such as search_path; Open says so at once, with what to do,
// instead of waiting for a server that will never accept.
func TestPgBouncerSearchPath(t *testing.T) {
	t.Parallel()
	b := storetest.NewPgBouncer(t)
	start := time.Now()
	_, err := store.Open(t.Context(), b.URL+"&search_path=other", nil)
	if err == nil || !strings.Contains(err.Error(), "search_path") || !strings.Contains(err.Error(), "ALTER ROLE") {
		t.Fatalf("err = %v; want one naming search_path and ALTER ROLE", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v; a refused parameter is not worth retrying", d)
	}
}
