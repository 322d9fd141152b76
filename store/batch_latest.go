package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const batchLatestSQL = `
SELECT b.id
FROM batches b
WHERE EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = b.id)
ORDER BY b.created_at DESC, b.id DESC
LIMIT 1`

// BatchLatest returns the id of the newest batch that has at least one
// run, or an error wrapping ErrNotFound when there is none.
func (s *Store) BatchLatest(ctx context.Context, db DBTX) (string, error) {
	var id string
	err := db.QueryRow(ctx, batchLatestSQL).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store.BatchLatest: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store.BatchLatest: %w", err)
	}
	return id, nil
}
