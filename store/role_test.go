package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestAnalystRole checks the Postgres role of migrations 000015, 000021,
// 000023 and 000025: as extractq_analyst, the report views, functions
// and the tables they read answer, and every table or view holding
// customer text is refused.
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
	for _, col := range []string{"reply", "stripped", "patch"} {
		var pe *pgconn.PgError
		if err := try(`SELECT ` + col + ` FROM llm_calls`); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("as extractq_analyst, SELECT %s FROM llm_calls: %v, want permission denied", col, err)
		}
	}
	// Nothing else in the schema is granted: every table and view not
	// named above is refused too.
	whole, columns := analystGranted(ctx, t, st)
	if got := strings.Join(whole, " "); got != "batch_cost batch_summary batches eval_results failing_fields failure_events field_failures "+
		"qa_field_estimates repair_effectiveness reply_failures runs triage_backlog" || !slices.Equal(columns, []string{"llm_calls"}) {
		t.Errorf("extractq_analyst may read %q and columns of %v, want the report views and the tables they read only", got, columns)
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

// analystGranted lists, sorted, the relations of st's schema that
// extractq_analyst may read whole, and those it may read some columns of
// only.
func analystGranted(ctx context.Context, t *testing.T, st *store.Store) (whole, columns []string) {
	t.Helper()
	rows, err := st.Pool.Query(ctx, `
SELECT c.relname, has_table_privilege('extractq_analyst', c.oid, 'SELECT')
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'v', 'm')
  AND has_any_column_privilege('extractq_analyst', c.oid, 'SELECT')
ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type rel struct {
		Name  string
		Whole bool
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rels {
		if r.Whole {
			whole = append(whole, r.Name)
		} else {
			columns = append(columns, r.Name)
		}
	}
	return whole, columns
}

// TestAnalystGrants checks migrations 000025 and 000026: analyst_grant
// reads what it grants from the table analyst_grants, so the analyst role
// reads exactly the relations listed there (whole, or but the withheld
// columns), the same ones as 000023's grant, and none of the tables of
// customer text nor llm_calls' replies and repair patches (000026); a new
// report view is granted by one row, as it is written. Down 000026, the
// patch is granted again; down 000025, the grant is 000023's again,
// granting the same.
func TestAnalystGrants(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t) // a schema of its own: migrated down and up
	// What 000015, 000021 and 000023 granted: the report and analyst views
	// and the tables their functions read; llm_calls without the replies.
	wantWhole := []string{"batch_cost", "batch_summary", "batches", "eval_results", "failing_fields", "failure_events",
		"field_failures", "qa_field_estimates", "repair_effectiveness", "reply_failures", "runs", "triage_backlog"}
	wantColumns := []string{"llm_calls"}
	customerText := []string{"messages", "extractions", "triage_items", "audit_log", "current_results", "qa_samples", "qa_verdicts",
		"reviewers", "api_tokens", "sessions", "results_outbox"}
	exec := func(sql string) {
		t.Helper()
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// revoke takes every grant of the schema from the role.
	revoke := func() {
		t.Helper()
		exec(`DO $$ BEGIN
			EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM extractq_analyst', current_schema());
		END $$`)
		if whole, columns := analystGranted(ctx, t, st); len(whole)+len(columns) != 0 {
			t.Fatalf("after the revoke the role reads %v and columns of %v", whole, columns)
		}
	}
	// regrant runs analyst_grant alone, so what the role reads is what
	// the function grants, not what an earlier migration left.
	regrant := func() {
		t.Helper()
		revoke()
		exec(`SELECT analyst_grant('extractq_analyst')`)
	}
	// wantPatch: whether the role reads llm_calls.patch (000025 and before).
	wantPatch := false
	check := func(when string, wantWhole, wantColumns []string) {
		t.Helper()
		whole, columns := analystGranted(ctx, t, st)
		if !slices.Equal(whole, wantWhole) || !slices.Equal(columns, wantColumns) {
			t.Errorf("%s: the role reads %v whole and columns of %v; want %v and %v", when, whole, columns, wantWhole, wantColumns)
		}
		for _, rel := range customerText {
			var reads bool
			if err := st.Pool.QueryRow(ctx, `SELECT has_any_column_privilege('extractq_analyst', $1::regclass, 'SELECT')`,
				rel).Scan(&reads); err != nil || reads {
				t.Errorf("%s: the role reads %s: %v, %v", when, rel, reads, err)
			}
		}
		var replies, patch bool
		if err := st.Pool.QueryRow(ctx, `SELECT has_column_privilege('extractq_analyst', 'llm_calls', 'reply', 'SELECT')
			OR has_column_privilege('extractq_analyst', 'llm_calls', 'stripped', 'SELECT'),
			has_column_privilege('extractq_analyst', 'llm_calls', 'patch', 'SELECT')`).Scan(&replies, &patch); err != nil || replies {
			t.Errorf("%s: the role reads llm_calls' replies: %v, %v", when, replies, err)
		}
		if patch != wantPatch {
			t.Errorf("%s: the role reads llm_calls.patch: %v, want %v", when, patch, wantPatch)
		}
	}

	// The table lists what the role reads, and nothing of customer text.
	rows, err := st.Pool.Query(ctx, `SELECT relation::text, withheld::text[] FROM analyst_grants ORDER BY relation`)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		Relation string
		Withheld []string
	}
	listed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[grant])
	if err != nil {
		t.Fatal(err)
	}
	var listedWhole, listedColumns []string
	for _, g := range listed {
		if slices.Contains(customerText, g.Relation) {
			t.Errorf("analyst_grants lists %s, which holds customer text", g.Relation)
		}
		if len(g.Withheld) == 0 {
			listedWhole = append(listedWhole, g.Relation)
			continue
		}
		listedColumns = append(listedColumns, g.Relation)
		if g.Relation == "llm_calls" && !slices.Equal(g.Withheld, []string{"reply", "stripped", "patch"}) {
			t.Errorf("llm_calls withholds %v, want reply, stripped and patch", g.Withheld)
		}
	}
	if !slices.Equal(listedWhole, wantWhole) || !slices.Equal(listedColumns, wantColumns) {
		t.Errorf("analyst_grants lists %v whole and %v by column; want %v and %v", listedWhole, listedColumns, wantWhole, wantColumns)
	}
	check("up, as migrated", wantWhole, wantColumns)
	regrant()
	check("up, analyst_grant alone", wantWhole, wantColumns)

	// A new view is one row, granted as it is written (the trigger).
	revoke()
	exec(`CREATE VIEW grant_test_counts AS SELECT count(*) AS n FROM runs`)
	exec(`INSERT INTO analyst_grants (relation, why) VALUES ('grant_test_counts', 'a test view: a count')`)
	check("up, a view added", slices.Sorted(slices.Values(append(slices.Clone(wantWhole), "grant_test_counts"))), wantColumns)
	// Its row goes with it: the schema is handed to the next test with
	// analyst_grants as it is (storetest keeps the table).
	exec(`DELETE FROM analyst_grants WHERE relation = 'grant_test_counts'`)
	exec(`DROP VIEW grant_test_counts`)

	// Down 000027 (runs' fillfactor, no grant), then down 000026: the
	// patch is granted again, by the trigger.
	for range 2 {
		if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
			t.Fatal(err)
		}
	}
	wantPatch = true
	check("down 000026, as migrated", wantWhole, wantColumns)

	// Down 000025: 000023's analyst_grant, granting the same.
	if err := store.MigrateDown(ctx, st.Pool, nil); err != nil {
		t.Fatal(err)
	}
	var table, trigger *string
	if err := st.Pool.QueryRow(ctx, `SELECT to_regclass('analyst_grants')::text, to_regproc('analyst_grants_apply')::text`).Scan(&table, &trigger); err != nil ||
		table != nil || trigger != nil {
		t.Errorf("after down: analyst_grants %v, analyst_grants_apply %v (%v); want both dropped", table, trigger, err)
	}
	check("down, as migrated", wantWhole, wantColumns)
	regrant()
	check("down, analyst_grant alone", wantWhole, wantColumns)

	if err := store.Migrate(ctx, st.Pool, nil); err != nil {
		t.Fatal(err)
	}
	wantPatch = false
	check("up again", wantWhole, wantColumns)
}
