package store

import (
	"context"
	"errors"
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
	ExpiresAt  time.Time  `db:"expires_at"` // from then on the token is refused
	LastUsedAt *time.Time `db:"last_used_at"`
	RevokedAt  *time.Time `db:"revoked_at"`
	// Role is what the token may do: its account's role or a narrower
	// one (Role.Covers), or RoleIngest (migration 000015).
	Role Role `db:"role"`
}

// Expired reports whether the token is past its expiry at now.
func (t APIToken) Expired(now time.Time) bool { return !now.Before(t.ExpiresAt) }

// ErrTokenExpired means an API token is past its expiry. The error is a
// *TokenExpiredError saying which token and since when.
var ErrTokenExpired = errors.New("API token expired")

// TokenExpiredError is an API token past its expiry. It matches
// ErrTokenExpired with errors.Is.
type TokenExpiredError struct {
	TokenID   int64
	ExpiredAt time.Time
}

func (e *TokenExpiredError) Error() string {
	return fmt.Sprintf("API token %d expired at %s", e.TokenID, e.ExpiredAt.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrTokenExpired.
func (e *TokenExpiredError) Is(target error) bool { return target == ErrTokenExpired }

// APITokenInsertParams is a new token of a reviewer.
type APITokenInsertParams struct {
	Login     string    // the reviewer's login; required
	Name      string    // required
	TokenHash []byte    // SHA-256 of the token; required
	ExpiresAt time.Time // required; after the creation time (now)
	// Role is one of TokenRoles that the account's role covers
	// (Role.Covers); "" means the account's own role.
	Role Role
}

const apiTokenColumns = `id, reviewer_id, name, created_at, expires_at, last_used_at, revoked_at, role`

const apiTokenInsertSQL = `
INSERT INTO api_tokens (reviewer_id, name, token_hash, expires_at, role)
SELECT id, $2, $3, $4, coalesce(nullif($5, ''), role) FROM reviewers WHERE login = $1
RETURNING ` + apiTokenColumns + `, $1::text AS login`

// APITokenInsert records a token for the reviewer login. An unknown login
// returns an error wrapping ErrNotFound; a hash already stored, ErrConflict;
// a role the account's does not cover, an error wrapping ErrRoleNotCovered.
func (s *Store) APITokenInsert(ctx context.Context, db DBTX, p APITokenInsertParams) (APIToken, error) {
	if p.Name == "" || len(p.TokenHash) == 0 || p.ExpiresAt.IsZero() {
		return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): name, token hash and expiry are required", p.Login)
	}
	if p.Role != "" {
		if _, err := ParseRole(string(p.Role), TokenRoles); err != nil {
			return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w", p.Login, err)
		}
		acct, err := s.ReviewerGetByLogin(ctx, db, p.Login)
		if err != nil {
			return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w", p.Login, err)
		}
		if !acct.Role.Covers(p.Role) {
			return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w: the account is %s; a token of role %s needs %s",
				p.Login, ErrRoleNotCovered, acct.Role, p.Role, coveringRole(p.Role))
		}
	}
	rows, err := db.Query(ctx, apiTokenInsertSQL, p.Login, CleanText(p.Name), p.TokenHash, p.ExpiresAt, string(p.Role))
	if err != nil {
		return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w", p.Login, interpretError(err))
	}
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken])
	if err != nil {
		return APIToken{}, fmt.Errorf("store.APITokenInsert(%q): %w", p.Login, interpretError(err))
	}
	return t, nil
}

// ErrRoleNotCovered means a token's role is wider than its account's
// (Role.Covers).
var ErrRoleNotCovered = errors.New("the account's role does not cover the token's")

// coveringRole names the narrowest account role that covers token role t.
func coveringRole(t Role) string {
	if t == RoleIngest || t == RoleAdmin {
		return "an admin account"
	}
	return "an account of role " + string(t) + " or wider"
}

const apiTokenAuthenticateSQL = `
WITH t AS (
    UPDATE api_tokens SET last_used_at = now()
    WHERE token_hash = $1 AND revoked_at IS NULL AND expires_at > now()
    RETURNING ` + apiTokenColumns + `
)
SELECT r.id, r.login, r.display_name, r.password_hash, r.disabled_at, r.created_at, r.auth_generation, r.role,
       t.id AS token_id, t.name AS token_name, t.created_at AS token_created_at, t.expires_at AS token_expires_at,
       t.last_used_at AS token_last_used_at, t.role AS token_role
FROM reviewers r JOIN t ON t.reviewer_id = r.id
WHERE r.disabled_at IS NULL`

// APITokenAuthenticate returns the reviewer whose live token has hash
// tokenHash, with the token, and records the use. The token's Role is
// what the request may do; it is never wider than the account's, which
// ReviewerSetRole keeps so (and authenticate refuses a token whose account
// no longer covers it, as not found). A token past its expiry
// returns a *TokenExpiredError (ErrTokenExpired); a revoked or unknown
// token, or one of a disabled reviewer, an error wrapping ErrNotFound.
func (s *Store) APITokenAuthenticate(ctx context.Context, db DBTX, tokenHash []byte) (Reviewer, APIToken, error) {
	var r Reviewer
	var t APIToken
	err := db.QueryRow(ctx, apiTokenAuthenticateSQL, tokenHash).Scan(&r.ID, &r.Login, &r.Name, &r.PasswordHash, &r.DisabledAt,
		&r.CreatedAt, &r.AuthGeneration, &r.Role, &t.ID, &t.Name, &t.CreatedAt, &t.ExpiresAt, &t.LastUsedAt, &t.Role)
	if errors.Is(err, pgx.ErrNoRows) {
		var expired TokenExpiredError
		err := db.QueryRow(ctx, `SELECT id, expires_at FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL AND expires_at <= now()`,
			tokenHash).Scan(&expired.TokenID, &expired.ExpiredAt)
		if err == nil {
			return Reviewer{}, APIToken{}, fmt.Errorf("store.APITokenAuthenticate: %w", &expired)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Reviewer{}, APIToken{}, fmt.Errorf("store.APITokenAuthenticate: %w", err)
		}
		return Reviewer{}, APIToken{}, fmt.Errorf("store.APITokenAuthenticate: %w", ErrNotFound)
	}
	if err != nil {
		return Reviewer{}, APIToken{}, fmt.Errorf("store.APITokenAuthenticate: %w", err)
	}
	t.ReviewerID, t.Login = r.ID, r.Login
	if !r.Role.Covers(t.Role) {
		return Reviewer{}, APIToken{}, fmt.Errorf("store.APITokenAuthenticate: token %d of role %s, account %s of role %s: %w",
			t.ID, t.Role, r.Login, r.Role, ErrNotFound)
	}
	return r, t, nil
}

// APITokenList returns the tokens of login (every reviewer's when login
// is empty), newest first.
func (s *Store) APITokenList(ctx context.Context, db DBTX, login string) ([]APIToken, error) {
	rows, err := db.Query(ctx, `
SELECT t.id, t.reviewer_id, r.login, t.name, t.created_at, t.expires_at, t.last_used_at, t.revoked_at, t.role
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
