// Package migrations holds the product's SQL migrations, embedded.
//
// Files are numbered as NNNNNN_name.up.sql with a matching
// NNNNNN_name.down.sql; each pair is one version, applied in one
// transaction by store.Migrate.
package migrations

import "embed"

// FS holds every *.sql migration file of this folder.
//
//go:embed *.sql
var FS embed.FS
