package ingest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store/storetest"
)

// TestRestoredDatabase: after a database restore, new runs get dedup ids
// the stream has never seen, so within its dedup window it stores them
// rather than dropping them as duplicates of the runs published before
// the restore. The restore is a fresh schema on the same stream: its
// message ids start again from 1, as a restored database hands out again
// the ids written after its backup.
func TestRestoredDatabase(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	const n = 10
	before, err := e.Ingest(t, strings.NewReader(ingesttest.GoodLines(n)), nil)
	if err != nil || before.Published != n {
		t.Fatalf("before the restore: %+v, %v", before, err)
	}

	restored := &ingesttest.Env{Store: storetest.NewStore(t), JS: e.JS, NATS: e.NATS, Stream: e.Stream, Pub: e.Pub}
	other := strings.ReplaceAll(ingesttest.GoodLines(n), `"u-`, `"after-`)
	after, err := restored.Ingest(t, strings.NewReader(other), nil)
	if err != nil || after.Published != n || after.DuplicateAnomalies != 0 {
		t.Fatalf("after the restore: %+v, %v", after, err)
	}
	if got := e.StreamMsgs(t); got != 2*n {
		t.Fatalf("stream holds %d messages, want %d: the restored database's runs were dropped as duplicates", got, 2*n)
	}
	batches := map[string]int{}
	info, err := e.Stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := e.Stream.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var env queue.Envelope
		if err := json.Unmarshal(m.Data, &env); err != nil {
			t.Fatal(err)
		}
		batches[env.BatchID]++
	}
	if batches[before.BatchID] != n || batches[after.BatchID] != n {
		t.Fatalf("stream messages by batch %v, want %d of %s and of %s", batches, n, before.BatchID, after.BatchID)
	}
	// Each restored run records where its own copy is.
	rows, err := restored.Store.Pool.Query(t.Context(), `SELECT dedup_id, stream_seq FROM runs`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var seq uint64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		m, err := e.Stream.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("run %s at %d: %v", id, seq, err)
		}
		if got := m.Header.Get("Nats-Msg-Id"); got != id {
			t.Errorf("run %s records sequence %d, which holds %q", id, seq, got)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
