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

// batchSourcesNamedSQL lists the source names, of batches with runs, that
// are $1 or end in "/$1", newest first.
const batchSourcesNamedSQL = `
SELECT b.source_name
FROM batches b
WHERE (b.source_name = $1 OR right(b.source_name, length($1) + 1) = '/' || $1)
  AND EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = b.id)
GROUP BY b.source_name
ORDER BY max(b.created_at) DESC
LIMIT $2`

// BatchSourcesNamed returns up to limit source names (ingested files) of
// batches with runs whose last path element is base, newest first: what a
// user who typed the file's path differently may have meant.
func (s *Store) BatchSourcesNamed(ctx context.Context, db DBTX, base string, limit int) ([]string, error) {
	rows, err := db.Query(ctx, batchSourcesNamedSQL, base, limitOr(limit, 10))
	if err != nil {
		return nil, fmt.Errorf("store.BatchSourcesNamed(%q): %w", base, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store.BatchSourcesNamed(%q): %w", base, err)
	}
	return out, nil
}
