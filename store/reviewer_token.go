package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// APIToken is a reviewer's token for tools using the triage JSON API. The
// store keeps only the token's hash.
type APIToken struct {
	ID         int64      `db:"id"`
	ReviewerID int64      `db:"reviewer_id"`
	Login      string     `db:"login"` // the reviewer's
	Name       string     `db:"name"`  // what the token is for, such as "nightly-rerun"
	CreatedAt  time.Time  `db:"created_at"`
	LastUsedAt *time.Time `db:"last_used_at"`
	RevokedAt  *time.Time `db:"revoked_at"`
}

// APITokenInsertParams is a new token of a reviewer.
type APITokenInsertParams struct {
	Login     string // the reviewer's login; required
	Name      string // required
	TokenHash []byte // SHA-256 of the token; required
}

const apiTokenInsertSQL = `
INSERT INTO api_tokens (reviewer_id, name, token_hash)
SELECT id, $2, $3 FROM reviewers WHERE login = $1
RETURNING id, reviewer_id, $1::text AS login, name, created_at, last_used_at, revoked_at`

// APITokenInsert records a token for the reviewer login. An unknown login
// returns an error wrapping ErrNotFound; a hash already stored, ErrConflict.
func (s *Store) APITokenInsert(ctx context.Context, db DBTX, p APITokenInsertParams) (APIToken, error) {
	if p.Name == "" || len(p.TokenHash) == 0 {
		return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): name and token hash are required", p.Login)
	}
	rows, err := db.Query(ctx, apiTokenInsertSQL, p.Login, CleanText(p.Name), p.TokenHash)
	if err != nil {
		return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w", p.Login, interpretError(err))
	}
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken])
	if err != nil {
		return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w", p.Login, interpretError(err))
	}
	return t, nil
}

const apiTokenAuthenticateSQL = `
WITH t AS (
    UPDATE api_tokens SET last_used_at = now()
    WHERE token_hash = $1 AND revoked_at IS NULL
    RETURNING reviewer_id
)
SELECT r.id, r.login, r.display_name, r.password_hash, r.disabled_at, r.created_at, r.auth_generation
FROM reviewers r JOIN t ON t.reviewer_id = r.id
WHERE r.disabled_at IS NULL`

// APITokenAuthenticate returns the reviewer whose live token has hash
// tokenHash and records the use. A revoked or unknown token, or one of a
// disabled reviewer, returns an error wrapping ErrNotFound.
func (s *Store) APITokenAuthenticate(ctx context.Context, db DBTX, tokenHash []byte) (Reviewer, error) {
	rows, err := db.Query(ctx, apiTokenAuthenticateSQL, tokenHash)
	if err != nil {
		return Reviewer{}, fmt.Errorf("store.APITokenAuthenticate: %w", err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Reviewer])
	if err != nil {
		return Reviewer{}, fmt.Errorf("store.APITokenAuthenticate: %w", interpretError(err))
	}
	return r, nil
}

// APITokenList returns the tokens of login (every reviewer's when login
// is empty), newest first.
func (s *Store) APITokenList(ctx context.Context, db DBTX, login string) ([]APIToken, error) {
	rows, err := db.Query(ctx, `
SELECT t.id, t.reviewer_id, r.login, t.name, t.created_at, t.last_used_at, t.revoked_at
FROM api_tokens t JOIN reviewers r ON r.id = t.reviewer_id
WHERE $1 = '' OR r.login = $1
ORDER BY t.created_at DESC, t.id DESC`, login)
	if err != nil {
		return nil, fmt.Errorf("store.APITokenList(%q): %w", login, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[APIToken])
	if err != nil {
		return nil, fmt.Errorf("store.APITokenList(%q): %w", login, err)
	}
	return out, nil
}

// APITokenRevoke revokes token id; revoking it again keeps the first time.
// An unknown id returns an error wrapping ErrNotFound.
func (s *Store) APITokenRevoke(ctx context.Context, db DBTX, id int64) error {
	tag, err := db.Exec(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("store.APITokenRevoke(%d): %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store.APITokenRevoke(%d): %w", id, ErrNotFound)
	}
	return nil
}
