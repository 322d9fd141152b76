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
  AND ($1 = '' OR b.source_name = $1)
  AND ($2 = '' OR b.schema_id = $2)
ORDER BY b.created_at DESC, b.id DESC
LIMIT 1`

// BatchLatest returns the id of the newest batch that has at least one
// run (a re-ingest of known messages makes an empty batch) and, when
// source is not empty, whose source name (the ingested file) is source,
// and, when schemaID is not empty, whose schema is schemaID. The error
// wraps ErrNotFound when there is none.
func (s *Store) BatchLatest(ctx context.Context, db DBTX, source, schemaID string) (string, error) {
	var id string
	err := db.QueryRow(ctx, batchLatestSQL, source, schemaID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store.BatchLatest(%q): %w", source, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store.BatchLatest(%q): %w", source, err)
	}
	return id, nil
}
