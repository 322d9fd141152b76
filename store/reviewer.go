package store

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reviewer is a person who works the triage queue. Accounts are made by
// the triage admin command; the password is kept only as a bcrypt hash.
type Reviewer struct {
	ID           int64      `db:"id"`
	Login        string     `db:"login"`        // lower-case letters, digits, '.', '_', '-'; unique
	Name         string     `db:"display_name"` // shown on pages; may be empty
	PasswordHash string     `db:"password_hash" json:"-"`
	DisabledAt   *time.Time `db:"disabled_at"` // nil while the account may log in
	CreatedAt    time.Time  `db:"created_at"`
	// AuthGeneration grows by one each time the password changes or the
	// account is disabled. A session is good only while the generation
	// it logged in under is the account's (the triage server checks it
	// at every request), so a change ends every session at once.
	AuthGeneration int64 `db:"auth_generation" json:"-"`
	// Role is what the account may do (migration 000015).
	Role Role `db:"role"`
}

// Disabled reports whether the account may no longer log in or use its
// API tokens.
func (r Reviewer) Disabled() bool { return r.DisabledAt != nil }

// loginPattern is the form of a reviewer login, as the table's CHECK has it.
var loginPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidLogin reports whether login may name a reviewer: 1 to 63 lower-case
// letters, digits, '.', '_' or '-', starting with a letter or digit.
func ValidLogin(login string) bool { return loginPattern.MatchString(login) }

const reviewerColumns = `id, login, display_name, password_hash, disabled_at, created_at, auth_generation, role`

// ReviewerInsertParams is a new reviewer account.
type ReviewerInsertParams struct {
	Login        string // required; see ValidLogin
	Name         string // may be empty
	PasswordHash string // required: a bcrypt hash
	Role         Role   // one of AccountRoles; "" means RoleReviewer
}

const reviewerInsertSQL = `
INSERT INTO reviewers (login, display_name, password_hash, role)
VALUES ($1, $2, $3, $4)
RETURNING ` + reviewerColumns

// ReviewerInsert creates a reviewer account. A login already used returns
// an error wrapping ErrConflict.
func (s *Store) ReviewerInsert(ctx context.Context, db DBTX, p ReviewerInsertParams) (Reviewer, error) {
	if !ValidLogin(p.Login) {
		return Reviewer{}, fmt.Errorf("store.ReviewerInsert(%q): login must be 1-63 of a-z 0-9 . _ - starting with a letter or digit", p.Login)
	}
	if p.PasswordHash == "" {
		return Reviewer{}, fmt.Errorf("store.ReviewerInsert(%q): password hash is required", p.Login)
	}
	if p.Role == "" {
		p.Role = RoleReviewer
	}
	if _, err := ParseRole(string(p.Role), AccountRoles); err != nil {
		return Reviewer{}, fmt.Errorf("store.ReviewerInsert(%q): %w", p.Login, err)
	}
	rows, err := db.Query(ctx, reviewerInsertSQL, p.Login, CleanText(p.Name), p.PasswordHash, p.Role)
	if err != nil {
		return Reviewer{}, fmt.Errorf("store.ReviewerInsert(%q): %w", p.Login, interpretError(err))
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Reviewer])
	if err != nil {
		return Reviewer{}, fmt.Errorf("store.ReviewerInsert(%q): %w", p.Login, interpretError(err))
	}
	return r, nil
}

// ReviewerGetByLogin returns the account of login, disabled or not, or an
// error wrapping ErrNotFound.
func (s *Store) ReviewerGetByLogin(ctx context.Context, db DBTX, login string) (Reviewer, error) {
	return reviewerGet(ctx, db, "ReviewerGetByLogin", `SELECT `+reviewerColumns+` FROM reviewers WHERE login = $1`, login)
}

// ReviewerGetByID returns the account id, disabled or not, or an error
// wrapping ErrNotFound.
func (s *Store) ReviewerGetByID(ctx context.Context, db DBTX, id int64) (Reviewer, error) {
	return reviewerGet(ctx, db, "ReviewerGetByID", `SELECT `+reviewerColumns+` FROM reviewers WHERE id = $1`, id)
}

func reviewerGet(ctx context.Context, db DBTX, op, query string, key any) (Reviewer, error) {
	rows, err := db.Query(ctx, query, key)
	if err != nil {
		return Reviewer{}, fmt.Errorf("store.%s(%v): %w", op, key, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Reviewer])
	if err != nil {
		return Reviewer{}, fmt.Errorf("store.%s(%v): %w", op, key, interpretError(err))
	}
	return r, nil
}

// ReviewerList returns every account, by login.
func (s *Store) ReviewerList(ctx context.Context, db DBTX) ([]Reviewer, error) {
	rows, err := db.Query(ctx, `SELECT `+reviewerColumns+` FROM reviewers ORDER BY login`)
	if err != nil {
		return nil, fmt.Errorf("store.ReviewerList: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Reviewer])
	if err != nil {
		return nil, fmt.Errorf("store.ReviewerList: %w", err)
	}
	return out, nil
}

// ReviewerCount returns how many accounts may log in (not disabled).
func (s *Store) ReviewerCount(ctx context.Context, db DBTX) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM reviewers WHERE disabled_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store.ReviewerCount: %w", err)
	}
	return n, nil
}

// ReviewerSetRole gives the account of login the role role (one of
// AccountRoles) and revokes its live API tokens the new role does not
// cover (Role.Covers), in one statement; its sessions take the new role at
// their next request. It returns the role before and how many tokens it
// revoked. An unknown login returns an error wrapping ErrNotFound.
func (s *Store) ReviewerSetRole(ctx context.Context, db DBTX, login string, role Role) (before Role, tokensRevoked int64, err error) {
	if _, err := ParseRole(string(role), AccountRoles); err != nil {
		return "", 0, fmt.Errorf("store.ReviewerSetRole(%q): %w", login, err)
	}
	var found bool
	err = db.QueryRow(ctx, `
WITH p AS (SELECT id, role FROM reviewers WHERE login = $1 FOR UPDATE),
r AS (UPDATE reviewers SET role = $2, updated_at = now() FROM p WHERE reviewers.id = p.id RETURNING reviewers.id),
t AS (
    UPDATE api_tokens SET revoked_at = now()
    WHERE reviewer_id IN (SELECT id FROM r) AND revoked_at IS NULL
      AND NOT (CASE $2 WHEN 'admin' THEN true WHEN 'reviewer' THEN role IN ('reviewer', 'analyst') ELSE role = $2 END)
    RETURNING id
)
SELECT EXISTS (SELECT FROM p), coalesce((SELECT role FROM p), ''), (SELECT count(*) FROM t)`, login, role).Scan(&found, &before, &tokensRevoked)
	if err != nil {
		return "", 0, fmt.Errorf("store.ReviewerSetRole(%q): %w", login, err)
	}
	if !found {
		return "", 0, fmt.Errorf("store.ReviewerSetRole(%q): %w", login, ErrNotFound)
	}
	return before, tokensRevoked, nil
}

// ReviewerLockAdmins locks the enabled admin accounts (FOR UPDATE) until
// db's transaction ends and returns how many there are, so a change that
// could leave none (triage admin set-role, disable) counts them again
// after itself with no other change of them in between: a concurrent one
// waits, then counts without the account this one changed.
func (s *Store) ReviewerLockAdmins(ctx context.Context, db DBTX) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM reviewers WHERE role = 'admin' AND disabled_at IS NULL FOR UPDATE) a`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store.ReviewerLockAdmins: %w", err)
	}
	return n, nil
}

// ReviewerCountByRole returns how many accounts of role may log in (not
// disabled).
func (s *Store) ReviewerCountByRole(ctx context.Context, db DBTX, role Role) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM reviewers WHERE disabled_at IS NULL AND role = $1`, role).Scan(&n); err != nil {
		return 0, fmt.Errorf("store.ReviewerCountByRole: %w", err)
	}
	return n, nil
}

// ReviewerSetPassword replaces the password hash of login and ends the
// account's sign-ins: it bumps AuthGeneration (ending every session) and
// revokes every live API token of the account, in one statement. It
// returns how many tokens it revoked. An unknown login returns an error
// wrapping ErrNotFound.
func (s *Store) ReviewerSetPassword(ctx context.Context, db DBTX, login, passwordHash string) (tokensRevoked int64, err error) {
	if passwordHash == "" {
		return 0, fmt.Errorf("store.ReviewerSetPassword(%q): password hash is required", login)
	}
	revoked, err := reviewerEndSignIns(ctx, db, `
UPDATE reviewers
SET password_hash = $2, auth_generation = auth_generation + 1, updated_at = now()
WHERE login = $1
RETURNING id, true AS ended`, login, passwordHash)
	if err != nil {
		return 0, fmt.Errorf("store.ReviewerSetPassword(%q): %w", login, err)
	}
	return revoked, nil
}

const reviewerDisableSQL = `
UPDATE reviewers
SET disabled_at = coalesce(disabled_at, now()), auth_generation = auth_generation + 1, updated_at = now()
WHERE login = $1
RETURNING id, true AS ended`

// reviewerEnableSQL enables an account. One that was disabled ends its
// sign-ins once more, for an account disabled before sign-ins ended with
// the disabling; enabling an enabled account changes nothing else.
const reviewerEnableSQL = `
UPDATE reviewers r
SET disabled_at = NULL, auth_generation = r.auth_generation + (p.disabled_at IS NOT NULL)::int, updated_at = now()
FROM (SELECT id, disabled_at FROM reviewers WHERE login = $1) p
WHERE r.id = p.id
RETURNING r.id, p.disabled_at IS NOT NULL AS ended`

// ReviewerSetDisabled disables (or enables again) the account of login.
// A disabled account can no longer log in; disabling it also ends its
// sign-ins as ReviewerSetPassword does (every session ended, every live
// API token revoked, in one statement), so enabling it again brings none
// of them back: its reviewer logs in again and is given new tokens. It
// returns how many tokens it revoked. An unknown login returns an error
// wrapping ErrNotFound.
func (s *Store) ReviewerSetDisabled(ctx context.Context, db DBTX, login string, disabled bool) (tokensRevoked int64, err error) {
	query := reviewerEnableSQL
	if disabled {
		query = reviewerDisableSQL
	}
	revoked, err := reviewerEndSignIns(ctx, db, query, login)
	if err != nil {
		return 0, fmt.Errorf("store.ReviewerSetDisabled(%q): %w", login, err)
	}
	return revoked, nil
}

// reviewerEndSignIns runs update, an UPDATE of one reviewer returning its
// id and whether its sign-ins end (ended), and in the same statement
// revokes the live API tokens of an account whose sign-ins end. It
// returns how many tokens it revoked, or an error wrapping ErrNotFound
// when update changed no account.
func reviewerEndSignIns(ctx context.Context, db DBTX, update string, args ...any) (int64, error) {
	query := `
WITH r AS (` + update + `),
t AS (
    UPDATE api_tokens SET revoked_at = now()
    WHERE reviewer_id IN (SELECT id FROM r WHERE ended) AND revoked_at IS NULL
    RETURNING id
)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM t)`
	var accounts, tokens int64
	if err := db.QueryRow(ctx, query, args...).Scan(&accounts, &tokens); err != nil {
		return 0, err
	}
	if accounts == 0 {
		return 0, ErrNotFound
	}
	return tokens, nil
}
