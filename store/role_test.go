package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestAnalystRole checks the Postgres role of migrations 000015 and
// 000021: as
// extractq_analyst, the report views, functions and the tables they read
// answer, and every table or view holding customer text is refused.
func TestAnalystRole(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	tx, err := st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE extractq_analyst`); err != nil {
		t.Fatal(err)
	}
	try := func(query string) error {
		if _, err := tx.Exec(ctx, `SAVEPOINT q`); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(ctx, query)
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT q`); rerr != nil {
			t.Fatal(rerr)
		}
		return err
	}
	for _, q := range []string{
		`SELECT * FROM failing_fields`,
		`SELECT * FROM repair_effectiveness`,
		`SELECT * FROM failing_fields_since(now() - interval '7 days')`,
		`SELECT * FROM repair_effectiveness_in('-infinity', NULL)`,
		`SELECT count(*) FROM failure_events`,
		`SELECT count(*) FROM runs`,
		`SELECT count(*) FROM batches`,
		`SELECT message_id, purpose, prompt_tokens, cost_usd, latency_ms FROM llm_calls`,
		`SELECT * FROM batch_summary`,
		`SELECT * FROM batch_cost`,
		`SELECT * FROM triage_backlog`,
		`SELECT * FROM field_failures`,
		`SELECT * FROM reply_failures`,
		`SELECT * FROM eval_results`,
		`SELECT * FROM qa_field_estimates`,
	} {
		if err := try(q); err != nil {
			t.Errorf("as extractq_analyst, %s: %v", q, err)
		}
	}
	for _, table := range []string{"messages", "llm_calls", "extractions", "triage_items", "audit_log", "current_results",
		"reviewers", "api_tokens", "sessions", "qa_samples", "qa_verdicts"} {
		err := try(`SELECT * FROM ` + table)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("as extractq_analyst, SELECT from %s: %v, want permission denied (42501)", table, err)
		}
	}
	for _, col := range []string{"reply", "stripped"} {
		var pe *pgconn.PgError
		if err := try(`SELECT ` + col + ` FROM llm_calls`); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("as extractq_analyst, SELECT %s FROM llm_calls: %v, want permission denied", col, err)
		}
	}
	// Nothing else in the schema is granted: every table and view not
	// named above is refused too.
	rows, err := st.Pool.Query(ctx, `
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm')
  AND has_table_privilege('extractq_analyst', c.oid, 'SELECT')
ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	granted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(granted, " "); got != "batch_cost batch_summary batches eval_results failing_fields failure_events field_failures "+
		"qa_field_estimates repair_effectiveness reply_failures runs triage_backlog" {
		t.Errorf("extractq_analyst may read %q, want the report views and the tables they read only", got)
	}
}

// TestReviewerRoles checks accounts' and tokens' roles: a new account is
// a reviewer, a token takes its account's role or a narrower one, a
// wider one is refused, and a new role revokes the tokens it does not
// cover.
func TestReviewerRoles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	rv, err := st.ReviewerInsert(ctx, st.Pool, store.ReviewerInsertParams{Login: "bob", PasswordHash: "x"})
	if err != nil || rv.Role != store.RoleReviewer {
		t.Fatalf("insert: %+v, %v; want role reviewer", rv, err)
	}
	if _, err := st.ReviewerInsert(ctx, st.Pool, store.ReviewerInsertParams{Login: "eve", PasswordHash: "x", Role: "root"}); err == nil {
		t.Error("role root: no error")
	}
	tok := func(name string, role store.Role) (store.APIToken, error) {
		return st.APITokenInsert(ctx, st.Pool, store.APITokenInsertParams{Login: "bob", Name: name, TokenHash: []byte(name),
			ExpiresAt: time.Now().Add(time.Hour), Role: role})
	}
	own, err := tok("own", "")
	if err != nil || own.Role != store.RoleReviewer {
		t.Fatalf("token of the account's role: %+v, %v", own, err)
	}
	narrow, err := tok("narrow", store.RoleAnalyst)
	if err != nil || narrow.Role != store.RoleAnalyst {
		t.Fatalf("analyst token: %+v, %v", narrow, err)
	}
	for _, wide := range []store.Role{store.RoleAdmin, store.RoleIngest} {
		if _, err := tok("wide-"+string(wide), wide); !errors.Is(err, store.ErrRoleNotCovered) {
			t.Errorf("a reviewer's %s token: %v, want ErrRoleNotCovered", wide, err)
		}
	}
	_, got, err := st.APITokenAuthenticate(ctx, st.Pool, []byte("narrow"))
	if err != nil || got.Role != store.RoleAnalyst {
		t.Fatalf("authenticate: %+v, %v", got, err)
	}
	before, revoked, err := st.ReviewerSetRole(ctx, st.Pool, "bob", store.RoleAnalyst)
	if err != nil || before != store.RoleReviewer || revoked != 1 {
		t.Fatalf("set-role analyst: %s, %d, %v; want reviewer before, 1 token revoked", before, revoked, err)
	}
	if _, _, err := st.APITokenAuthenticate(ctx, st.Pool, []byte("own")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the reviewer token after set-role analyst: %v, want refused", err)
	}
	if _, _, err := st.APITokenAuthenticate(ctx, st.Pool, []byte("narrow")); err != nil {
		t.Errorf("the analyst token after set-role analyst: %v", err)
	}
	if _, _, err := st.ReviewerSetRole(ctx, st.Pool, "nobody", store.RoleAdmin); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("set-role of nobody: %v", err)
	}
}

// TestRolesMigration checks migration 000015 on accounts and tokens made
// before it: they become admin (they had every power), and the role
// extractq_analyst survives the migration's down, which other schemas
// may use.
func TestRolesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t) // a schema of its own: migrated down and up
	// Down to before 000015, whatever came after it.
	status, err := store.MigrateStatus(ctx, st.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range status {
		if m.Applied && m.Name >= "000015" {
			if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := st.Pool.Exec(ctx, `INSERT INTO reviewers (login, password_hash) VALUES ('old', 'x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `INSERT INTO api_tokens (reviewer_id, name, token_hash, expires_at)
		SELECT id, 'old', '\x01', now() + interval '1 day' FROM reviewers WHERE login = 'old'`); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := st.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst')`).Scan(&exists); err != nil || !exists {
		t.Errorf("extractq_analyst after down: exists %v, %v", exists, err)
	}
	if err := store.Migrate(ctx, st.Pool, nil); err != nil {
		t.Fatal(err)
	}
	rv, tok, err := st.APITokenAuthenticate(ctx, st.Pool, []byte{1})
	if err != nil || rv.Role != store.RoleAdmin || tok.Role != store.RoleAdmin {
		t.Fatalf("after up: account %s, token %s, %v; want both admin", rv.Role, tok.Role, err)
	}
	nw, err := st.ReviewerInsert(ctx, st.Pool, store.ReviewerInsertParams{Login: "new", PasswordHash: "x"})
	if err != nil || nw.Role != store.RoleReviewer {
		t.Errorf("a new account: %s, %v; want reviewer", nw.Role, err)
	}
}
