package store

import (
	"context"
	"fmt"
)

// Reviewers' web sessions live in the sessions table, which the triage
// server's session manager (alexedwards/scs, pgxstore) reads and writes.

// SessionDeleteExpired deletes the sessions past their expiry and returns
// how many.
func (s *Store) SessionDeleteExpired(ctx context.Context, db DBTX) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM sessions WHERE expiry < now()`)
	if err != nil {
		return 0, fmt.Errorf("store.SessionDeleteExpired: %w", err)
	}
	return tag.RowsAffected(), nil
}
