package export

import (
	"fmt"
	"io/fs"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/schemas"
)

// SchemaColumns returns the record columns (Columns) of the schema cfg
// names schemaID, read from the bundled schemas as the worker reads it.
// The error names the schema when the configuration has no such schema
// or its file does not read.
func SchemaColumns(cfg *config.Config, schemaID string) ([]Column, error) {
	sc, ok := cfg.SchemaByID(schemaID)
	if !ok {
		return nil, fmt.Errorf("export: schema %q is not in the configuration (schemas[].id): its columns are unknown", schemaID)
	}
	b, err := fs.ReadFile(schemas.FS, sc.File)
	if err != nil {
		return nil, fmt.Errorf("export: schema %s: %w", schemaID, err)
	}
	cols, err := Columns(b)
	if err != nil {
		return nil, fmt.Errorf("export: schema %s (%s): %w", schemaID, sc.File, err)
	}
	return cols, nil
}
