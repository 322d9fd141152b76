package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/store"
)

// writeResults writes one line per message of batch batchID to w, by
// message id: in format jsonl the same lines as ingest serve's GET
// /v1/batches/{id}/results (store.BatchResult), in csv their CSV (package
// export) with the columns of the batch's schema, read from the
// configuration at configPath. It returns how many it wrote; an error
// names the batch when there is no such batch.
func writeResults(ctx context.Context, w io.Writer, st *store.Store, batchID, format, configPath string, env startup.Env) (int, error) {
	schemaID, err := st.BatchSchemaID(ctx, st.Pool, batchID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("there is no batch %q", batchID)
	} else if err != nil {
		return 0, err
	}
	var cols []export.Column
	if format == export.FormatCSV {
		cfg, err := startup.LoadConfig(configPath, env)
		if err != nil {
			return 0, err
		}
		if cols, err = export.SchemaColumns(cfg, schemaID); err != nil {
			return 0, err
		}
	}
	ew := export.NewWriter(w, format, cols)
	n := 0
	err = st.BatchResultPages(ctx, st.Pool, store.BatchResultListParams{BatchID: batchID}, func(page []store.BatchResult) error {
		for _, row := range page {
			if err := ew.Write(row); err != nil {
				return err
			}
		}
		n += len(page)
		return ew.Flush()
	})
	if err != nil {
		return n, err
	}
	return n, ew.Flush()
}
