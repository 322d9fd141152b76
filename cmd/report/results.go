package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/extractq/extractq/store"
)

// writeResults writes one JSON line per message of batch batchID to w, by
// message id: the same lines as ingest serve's GET
// /v1/batches/{id}/results (store.BatchResult). It returns how many it
// wrote; an error names the batch when there is no such batch.
func writeResults(ctx context.Context, w io.Writer, st *store.Store, batchID string) (int, error) {
	if _, err := st.BatchSummary(ctx, st.Pool, batchID); errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("there is no batch %q", batchID)
	} else if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	n := 0
	err := st.BatchResultPages(ctx, st.Pool, store.BatchResultListParams{BatchID: batchID}, func(page []store.BatchResult) error {
		for _, row := range page {
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		n += len(page)
		return bw.Flush()
	})
	if err != nil {
		return n, err
	}
	return n, bw.Flush()
}
