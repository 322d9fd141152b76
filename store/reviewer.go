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
}

// Disabled reports whether the account may no longer log in or use its
// API tokens.
func (r Reviewer) Disabled() bool { return r.DisabledAt != nil }

// loginPattern is the form of a reviewer login, as the table's CHECK has it.
var loginPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidLogin reports whether login may name a reviewer: 1 to 63 lower-case
// letters, digits, '.', '_' or '-', starting with a letter or digit.
func ValidLogin(login string) bool { return loginPattern.MatchString(login) }

const reviewerColumns = `id, login, display_name, password_hash, disabled_at, created_at`

// ReviewerInsertParams is a new reviewer account.
type ReviewerInsertParams struct {
	Login        string // required; see ValidLogin
	Name         string // may be empty
	PasswordHash string // required: a bcrypt hash
}

const reviewerInsertSQL = `
INSERT INTO reviewers (login, display_name, password_hash)
VALUES ($1, $2, $3)
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
	rows, err := db.Query(ctx, reviewerInsertSQL, p.Login, CleanText(p.Name), p.PasswordHash)
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

// ReviewerSetPassword replaces the password hash of login. An unknown
// login returns an error wrapping ErrNotFound.
func (s *Store) ReviewerSetPassword(ctx context.Context, db DBTX, login, passwordHash string) error {
	if passwordHash == "" {
		return fmt.Errorf("store.ReviewerSetPassword(%q): password hash is required", login)
	}
	tag, err := db.Exec(ctx, `UPDATE reviewers SET password_hash = $2, updated_at = now() WHERE login = $1`, login, passwordHash)
	if err != nil {
		return fmt.Errorf("store.ReviewerSetPassword(%q): %w", login, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store.ReviewerSetPassword(%q): %w", login, ErrNotFound)
	}
	return nil
}

// ReviewerSetDisabled disables (or enables again) the account of login.
// A disabled account can neither log in nor use its API tokens, and its
// open sessions stop working at their next request. An unknown login
// returns an error wrapping ErrNotFound.
func (s *Store) ReviewerSetDisabled(ctx context.Context, db DBTX, login string, disabled bool) error {
	tag, err := db.Exec(ctx, `
UPDATE reviewers
SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END, updated_at = now()
WHERE login = $1`, login, disabled)
	if err != nil {
		return fmt.Errorf("store.ReviewerSetDisabled(%q): %w", login, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store.ReviewerSetDisabled(%q): %w", login, ErrNotFound)
	}
	return nil
}
